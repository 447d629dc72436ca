"""Fit the engine profiles' efficiency scales to the corpus, and cross-validate by publisher.

What is fitted, for each engine and each GPU family its corpus rows cover (:class:`FitParam`):

- ``compute``: one scale on the GPU profile's GEMM compute and prefill-attention efficiencies;
- ``memory``: one scale on its GEMM memory, decode-attention and element-wise efficiencies;
- ``moe`` (engine-wide, with MoE rows): the routed experts' grouped GEMMs against dense GEMMs;
- ``frontend`` (engine-wide, with rows served over HTTP): per-request time of the engine's front end
  beyond its cited cost (``frontend_fitted_per_request_s``), in milliseconds within ``[0, 200]``.

Host times are not fitted here: they keep their cited values (``clustersim calibrate`` fits them to a user's
own measurements). Every fit starts from the engine profiles without their ``efficiency`` blocks and fitted
front-end time (all scales 1, 1 ms of extra time), never from a fitted profile. Scales are fitted in log space
within ``[e^-2, e^2]`` (an efficiency is still capped at 1), with a weak pull towards 1, so a scale no row
constrains stays 1. A row's residual is ``log(predicted / published)`` of its scored metric of each kind
(throughput, TTFT, TPOT/ITL, E2E), under a soft-L1 loss: a row no setting can fit (a missing term) bends the
fit less than squared error would let it. The Jacobian is taken by finite differences, re-running only the
rows each parameter touches.

Leave-one-publisher-out: each publisher's rows are predicted by a fit to every other publisher's rows. A fold
starts from the all-rows fit for the parameters the held-out rows do not touch and from 1 for those they do,
so the held-out rows' own values never seed their prediction.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import Cited, EfficiencyScales, EngineProfile
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.predict import Prediction, RowTask, candidate_root, predict_all
from clustersim.validation.rowscenario import RowScenario
from clustersim.validation.runcorpus import METRIC_KINDS

SCALE_BOUND = 2.0  # |log(scale)| at most: a scale in [0.14, 7.4]
PRIOR_WEIGHT = 0.3  # the pull of log(scale) towards 0, against residuals in log units
FAILED_RESIDUAL = 2.0  # a row that cannot be simulated with a candidate
STEP = 0.05  # finite-difference step (log units; milliseconds for front-end time)
FRONTEND_MAX_MS = 200.0
FRONTEND_STEP_MS = 2.0  # wide enough that the small jumps of discrete batching do not decide the slope
FRONTEND_START_MS = 1.0
SCALE_FIELDS = {
    # prefill attention is not scaled: engines run the FlashAttention kernels whose published speed the
    # GPU profiles carry (see prefill_attention_compute_efficiency_frac), so what differs between engines
    # on compute is their GEMMs and what they fuse around them
    "compute": ("gemm_compute_scale",),
    "memory": ("gemm_memory_scale", "decode_attention_scale", "elementwise_scale"),
}
FITTED_SOURCE = "fitted by `clustersim validate --fit` to the public validation corpus"


@dataclass(frozen=True)
class FitParam:
    """One fitted number: a scale (log) of one engine on one GPU family, or an engine-wide one."""

    engine: str
    kind: str  # compute | memory | moe | frontend
    family: str | None = None

    @property
    def label(self) -> str:
        return f"{self.engine}.{self.kind}" + (f".{self.family}" if self.family else "")

    def touches(self, engine: str, family: str | None, moe: bool) -> bool:
        if engine != self.engine:
            return False
        if self.kind == "moe":
            return moe
        return self.family is None or self.family == family

    def touches_row(self, row: FitRow) -> bool:
        if self.kind == "frontend":
            return row.engine == self.engine and row.served
        return self.touches(row.engine, row.family, row.moe)


@dataclass(frozen=True)
class FitRow:
    """A simulable corpus row with what the fit needs: its engine profile, GPU family, task."""

    row: CorpusRow
    engine: str
    family: str | None
    moe: bool
    task: RowTask
    served: bool = False  # the requests pass the engine's HTTP front end


@dataclass
class FitResult:
    """The fitted values (natural units: scales, seconds) and the rows each parameter rests on."""

    params: list[FitParam]
    values: list[float]
    num_rows: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0


def fit_rows(built: Sequence[RowScenario], catalogue: Catalogue) -> list[FitRow]:
    """The rows a fit can use: simulable ones, with their engine profile and GPU family."""
    found = []
    for b in built:
        if b.mapping is None:
            continue
        cluster = b.mapping["cluster"]
        hardware = catalogue.hardware(cluster["hardware"])
        family = hardware.family.value if hardware.family is not None else None
        moe = catalogue.model(cluster["model"]).num_experts is not None
        task = RowTask(b.row.row_id, b.mapping, b.steady, b.replicas_per_run)
        found.append(FitRow(b.row, cluster["engine"], family, moe, task, bool(cluster.get("frontend", True))))
    return found


def parameters(rows: Sequence[FitRow]) -> list[FitParam]:
    """Every parameter at least one row touches, in a stable order."""
    params: set[FitParam] = set()
    for r in rows:
        if r.family is not None:
            params.update((FitParam(r.engine, "compute", r.family), FitParam(r.engine, "memory", r.family)))
        if r.moe:
            params.add(FitParam(r.engine, "moe"))
        if r.served:
            params.add(FitParam(r.engine, "frontend"))
    return sorted(params, key=lambda p: (p.engine, p.kind, p.family or ""))


def _scaled_engine(profile: EngineProfile, params: Sequence[FitParam], values: Sequence[float]) -> EngineProfile:
    """``profile`` with an ``efficiency`` block holding ``values`` (``moe`` goes into every family's)."""
    efficiency: dict[str, dict[str, Any]] = {}

    def cited(value: float) -> Cited[float]:
        return Cited[float](value=float(value), source=FITTED_SOURCE)

    for param, value in zip(params, values, strict=True):
        if param.kind in SCALE_FIELDS and param.family is not None:
            for name in SCALE_FIELDS[param.kind]:
                efficiency.setdefault(param.family, {})[name] = cited(value)
    for param, value in zip(params, values, strict=True):
        if param.kind == "moe":
            for scales in efficiency.values():
                scales["moe_scale"] = cited(value)
    blocks = {family: EfficiencyScales(**scales) for family, scales in efficiency.items()}
    update: dict[str, Any] = {"efficiency": blocks or None}
    for param, value in zip(params, values, strict=True):
        if param.kind == "frontend":
            update["frontend_fitted_per_request_s"] = cited(value)
    return profile.model_copy(update=update)


def reference_engines(catalogue: Catalogue) -> dict[str, EngineProfile]:
    """Every engine profile of the catalogue without its ``efficiency`` block: where every fit starts."""
    engines = {}
    for name in catalogue.names("engine"):
        engines[name] = catalogue.engine(name).model_copy(
            update={"efficiency": None, "frontend_fitted_per_request_s": None}
        )
    return engines


def engines_with(
    base: Mapping[str, EngineProfile], params: Sequence[FitParam], values: Sequence[float]
) -> dict[str, EngineProfile]:
    """The engine profiles with the parameters set to ``values`` (natural units)."""
    engines = dict(base)
    for name in {p.engine for p in params}:
        mine = [(p, v) for p, v in zip(params, values, strict=True) if p.engine == name]
        engines[name] = _scaled_engine(base[name], [p for p, _ in mine], [v for _, v in mine])
    return engines


def natural(param: FitParam, x: float) -> float:
    """A parameter's value from the solver's: a scale from its log, a time in seconds from milliseconds."""
    return x / 1e3 if param.kind == "frontend" else math.exp(x)


def solver_start(param: FitParam) -> float:
    """Where every fit starts a parameter: a scale of 1, 1 ms of extra front-end time."""
    return FRONTEND_START_MS if param.kind == "frontend" else 0.0


def solver_bounds(param: FitParam) -> tuple[float, float]:
    return (0.0, FRONTEND_MAX_MS) if param.kind == "frontend" else (-SCALE_BOUND, SCALE_BOUND)


def solver_step(param: FitParam) -> float:
    """The finite-difference step: log units for a scale, milliseconds for front-end time."""
    return FRONTEND_STEP_MS if param.kind == "frontend" else STEP


def prior_weight(param: FitParam) -> float:
    """The pull towards the start: scales towards 1; front-end time has none."""
    return 0.0 if param.kind == "frontend" else PRIOR_WEIGHT


def residuals(rows: Sequence[FitRow], predictions: Mapping[str, Prediction | None]) -> NDArray[np.float64]:
    """``log(predicted / published)`` of each row's scored metric of each kind."""
    out = []
    for r in rows:
        found = predictions.get(r.row.row_id)
        published = r.row.comparable_metrics
        for metrics in METRIC_KINDS.values():
            metric = next((m for m in metrics if m in published), None)
            if metric is None:
                continue
            value = found.get(metric) if found is not None else None
            good = value is not None and value > 0
            out.append(math.log(value / published[metric]) if good else FAILED_RESIDUAL)  # type: ignore[operator]
    return np.asarray(out, dtype=np.float64)


class Evaluator:
    """Predictions of the fit rows for a vector of parameter values, cached by that vector."""

    def __init__(self, rows: Sequence[FitRow], params: Sequence[FitParam], base: Mapping[str, EngineProfile],
                 catalogue_root: Path, pool: Executor | None, scratch: Path) -> None:  # fmt: skip
        self.rows, self.params, self.base = list(rows), list(params), base
        self.root, self.pool, self.scratch = catalogue_root, pool, scratch
        self.cache: dict[tuple[float, ...], dict[str, Prediction | None]] = {}
        self.num_runs = 0

    def predict(self, x: NDArray[np.float64], only: Sequence[FitRow] | None = None) -> dict[str, Prediction | None]:
        key = tuple(float(v) for v in x)
        if only is None and key in self.cache:
            return self.cache[key]
        values = [natural(p, v) for p, v in zip(self.params, x, strict=True)]
        engines = engines_with(self.base, self.params, values)
        root = candidate_root(self.root, engines, self.scratch / f"candidate-{self.num_runs}")
        todo = only if only is not None else self.rows
        self.num_runs += 1
        found = predict_all([r.task for r in todo], root, self.pool)
        if only is None:
            self.cache[key] = found
        return found


def _vector(ev: Evaluator, x: NDArray[np.float64], active: Sequence[int]) -> NDArray[np.float64]:
    prior = [prior_weight(ev.params[i]) * x[i] for i in active]
    return np.concatenate([residuals(ev.rows, ev.predict(x)), np.asarray(prior, dtype=np.float64)])


def _jacobian(ev: Evaluator, x: NDArray[np.float64], active: Sequence[int]) -> NDArray[np.float64]:
    base = ev.predict(x)
    r0 = residuals(ev.rows, base)
    jac = np.zeros((len(r0) + len(active), len(active)))
    for col, i in enumerate(active):
        param = ev.params[i]
        touched = [r for r in ev.rows if param.touches_row(r)]
        if touched:
            step = solver_step(param)
            moved = x.copy()
            moved[i] += step
            changed = {**base, **ev.predict(moved, touched)}
            jac[: len(r0), col] = (residuals(ev.rows, changed) - r0) / step
        jac[len(r0) + col, col] = prior_weight(param)
    return jac


def fit(ev: Evaluator, x0: NDArray[np.float64], active: Sequence[int], max_iterations: int = 8,
        on_step: Callable[[int, float], None] | None = None) -> NDArray[np.float64]:  # fmt: skip
    """Fit the ``active`` parameters from ``x0`` (the others stay); returns the full vector."""
    x = x0.copy()

    def full(sub: NDArray[np.float64]) -> NDArray[np.float64]:
        x[list(active)] = sub
        return x.copy()

    def fun(sub: NDArray[np.float64]) -> NDArray[np.float64]:
        vector = _vector(ev, full(sub), active)
        if on_step is not None:
            on_step(ev.num_runs, float(np.sum(np.abs(vector))))
        return vector

    result = least_squares(
        fun,
        x0[list(active)],
        jac=lambda sub: _jacobian(ev, full(sub), active),
        bounds=tuple(zip(*(solver_bounds(ev.params[i]) for i in active), strict=True)),
        loss="soft_l1",
        f_scale=0.3,
        max_nfev=max_iterations,
        x_scale=1.0,
    )
    return full(result.x)


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="clustersim-corpusfit-"))
