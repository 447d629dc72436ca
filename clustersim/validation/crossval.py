"""The corpus fit end to end: fit on all rows, then leave each publisher out, and write the profiles.

:func:`fit_corpus` returns the all-rows fit (what the shipped engine profiles carry), its in-sample
predictions, and every row's prediction by the fold that left its publisher out (what the docs
report). :func:`write_efficiency` puts the fitted scales into the engine profiles' YAML files.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import EngineProfile
from clustersim.sweeps.backends import default_jobs
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.corpusfit import (
    ENGINE_FAMILY_KINDS,
    FAMILIES,
    FIT_FTOL,
    FRONTEND_FIELDS,
    SCALE_FIELDS,
    Atom,
    Evaluator,
    FitOutcome,
    FitParam,
    FitRow,
    atom_scales,
    fit,
    fit_rows,
    natural,
    parameters,
    reference_engines,
    scratch_dir,
    solver_start,
    within_bounds,
)
from clustersim.validation.fitcache import cached_fit, fit_key, saved_values
from clustersim.validation.predict import Prediction
from clustersim.validation.rowmemo import RUNS_PER_ROW, RowMemo
from clustersim.validation.rowscenario import row_scenario
from clustersim.validation.runcorpus import RowOutcome, profiles_sha256

OnProgress = Callable[[str], None]


@dataclass(frozen=True)
class CorpusFit:
    """The all-rows fit and the cross-validated predictions."""

    params: list[FitParam]
    values: list[float]  # natural units (scales)
    num_rows: dict[str, int]  # rows touching each parameter (by label)
    in_sample: list[RowOutcome]  # the rows fitted to, by the all-rows fit
    cross_validated: list[RowOutcome]  # every simulated row (those whose GPU is in doubt too), by its fold
    skipped: list[RowOutcome]
    folds: dict[str, FitOutcome] = field(default_factory=dict)  # each publisher's fold: how it ended
    doubted: list[RowOutcome] = field(default_factory=list)  # rows whose GPU is in doubt, by the all-rows fit


def _touched(param: FitParam, rows: Sequence[FitRow]) -> bool:
    return any(param.touches_row(r) for r in rows)


def _outcomes(rows: Sequence[FitRow], predictions: dict[str, Prediction | None]) -> list[RowOutcome]:
    found = []
    for r in rows:
        predicted = predictions.get(r.row.row_id)
        status = "simulated" if predicted is not None else "failed"
        found.append(RowOutcome(r.row, status, "" if predicted is not None else "failed with the fitted profiles",
                                predicted or {}, {}))  # fmt: skip
    return found


FOLD_JACOBIAN_EVERY = 3  # a fold takes its Jacobian afresh at every third step: on SGLang's MI300X rows
# (two publishers) it reached the optimum of a Jacobian at every step with half the runs, where one Jacobian
# for the whole fold stopped short of it


def fit_corpus(
    rows: Sequence[CorpusRow],
    catalogue: Catalogue,
    jobs: int | None = None,
    max_iterations: int = 8,
    on_progress: OnProgress | None = None,
    fold_iterations: int | None = None,
    cross_validate: bool = True,
    checkpoints: Path | None = None,
    start_from: Path | None = None,
) -> CorpusFit:
    """Fit on every simulable row, then (``cross_validate``) once per publisher without its rows; each
    fit's outcome is kept under ``checkpoints`` and reused from there while its inputs are the same.
    With ``start_from`` (another run's ``checkpoints``), each fit starts where the same fit there ended:
    the all-rows fit at its values, each fold at the values the earlier fold without the same publisher
    reached for the parameters the left-out rows touch (:func:`_reset`), never at values fitted to them.
    Rows whose GPU is in doubt (``gpu_doubt``) are predicted by their publisher's fold with the others, but
    no fit uses them: the in-sample outcomes leave them out (``doubted`` has them, by the all-rows fit)."""
    say = on_progress or (lambda _: None)
    built = [row_scenario(r, catalogue) for r in rows]
    skipped = [RowOutcome(b.row, "skipped", b.skip_reason or "", {}, {}) for b in built if b.mapping is None]
    scored = fit_rows(built, catalogue)
    frows = [r for r in scored if r.row.gpu_doubt is None]  # the rows fitted to
    params = parameters(frows)
    base = reference_engines(catalogue)
    profiles_hash = profiles_sha256(catalogue.root)
    scratch = scratch_dir()
    memo = RowMemo(RUNS_PER_ROW * max(1, len(scored)))  # rows whose values repeat across the fits run once
    try:
        with ProcessPoolExecutor(max_workers=jobs or default_jobs()) as pool:

            def evaluator(subset: Sequence[FitRow], name: str) -> Evaluator:
                return Evaluator(subset, params, base, catalogue.root, pool, scratch / name, memo)

            def progress(name: str) -> Callable[[int, float], None]:
                return lambda runs, cost: say(f"{name}: evaluation {runs}, sum |residual| {cost:.2f}")

            def solve(name: str, subset: Sequence[FitRow], x0: np.ndarray, active: list[int], iterations: int,
                      every: int) -> FitOutcome:  # fmt: skip
                key = fit_key(profiles_hash, subset, params, x0, active, iterations, every)
                ev = evaluator(subset, name)
                return cached_fit(checkpoints, name, key,
                                  lambda: fit(ev, x0, active, iterations, progress(name), every),
                                  [p.label for p in params])  # fmt: skip

            def earlier(name: str) -> dict[str, float]:  # where an earlier fit of that name ended
                return migrated(saved_values(start_from, name), params, base)

            everything = evaluator(scored, "all")
            start = np.asarray([within_bounds(p, earlier("all-rows").get(p.label, solver_start(p))) for p in params])
            all_rows = solve("all-rows", frows, start, list(range(len(params))), max_iterations, 1)
            say(f"all rows: {_fold_line(all_rows)}")
            x_all = all_rows.x
            in_sample = everything.predict(x_all, search=True)
            held_out: dict[str, Prediction | None] = {}
            folds: dict[str, FitOutcome] = {}
            for publisher in sorted({r.row.publisher for r in scored}) if cross_validate else ():
                train = [r for r in frows if r.row.publisher != publisher]
                held = [r for r in scored if r.row.publisher == publisher]
                fitted_held = [r for r in held if r.row.gpu_doubt is None]
                fold_start = _reset(params, x_all, fitted_held, earlier(f"without-{publisher}"), train)
                active = [i for i, p in enumerate(params) if _touched(p, train)]
                x_fold = fold_start  # the all-rows fit's, where every held-out row is in doubt (none fitted)
                if active and fitted_held:
                    iterations = fold_iterations or max_iterations
                    folds[publisher] = solve(f"without-{publisher}", train, fold_start, active, iterations,
                                             FOLD_JACOBIAN_EVERY)  # fmt: skip
                    x_fold = folds[publisher].x
                    say(f"without {publisher}: {_fold_line(folds[publisher])} ({memo.hits} row runs reused so far)")
                held_out.update(evaluator(held, f"held-{publisher}").predict(x_fold, search=True))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    counts = {p.label: sum(p.touches_row(r) for r in frows) for p in params}
    values = [natural(p, x) for p, x in zip(params, x_all, strict=True)]
    doubted = _outcomes([r for r in scored if r.row.gpu_doubt is not None], in_sample)
    return CorpusFit(params, values, counts, _outcomes(frows, in_sample), _outcomes(scored, held_out), skipped,
                     folds, doubted)  # fmt: skip


def _reset(params: Sequence[FitParam], x_all: np.ndarray, held: Sequence[FitRow],
           earlier: dict[str, float] | None = None, train: Sequence[FitRow] | None = None) -> np.ndarray:  # fmt: skip
    """A fold's start: the all-rows fit, with every parameter the held-out rows touch back at its start,
    or at its value in ``earlier`` (where an earlier fit without the same rows ended). A parameter none of
    the fold's own rows (``train``) touches stays at its start: the fold does not fit it, and an earlier
    value of it rests on rows it no longer has (a scale now fitted per GPU family that an earlier fit had
    one engine-wide value of, migrated from rows of another family)."""
    start = x_all.copy()
    for i, param in enumerate(params):
        if _touched(param, held):
            fitted = train is None or _touched(param, train)
            value = (earlier or {}).get(param.label, solver_start(param)) if fitted else solver_start(param)
            start[i] = within_bounds(param, value)
    return start


def migrated(earlier: dict[str, float], params: Sequence[FitParam],
             engines: Mapping[str, EngineProfile]) -> dict[str, float]:  # fmt: skip
    """``earlier`` (an earlier fit's values by label) with a value for each scale now fitted per GPU family
    that the earlier fit had one engine-wide value of: that value, less the log of the rate the engine
    now cites for that family's kernels (``weight_only_rate_frac``), so the family starts at the rate the
    earlier fit reached."""
    found = dict(earlier)
    for param in params:
        wide = f"{param.engine}.{param.kind}"
        if param.kind in ENGINE_FAMILY_KINDS and param.label not in found and wide in earlier:
            rates = engines[param.engine or ""].weight_only_rate_frac or {}
            cited = rates.get(param.family) if param.family is not None else None  # type: ignore[call-overload]
            found[param.label] = earlier[wide] - math.log(cited.value if cited is not None else 1.0)
    return found


def _fold_line(outcome: FitOutcome) -> str:
    state = "converged" if outcome.converged else "stopped at its cap"
    return f"{state} after {outcome.evaluations} evaluations"


def folds_summary(result: CorpusFit) -> str:
    """One sentence on how the leave-one-publisher-out fits ended (converged, or stopped at their cap)."""
    if not result.folds:
        return ""
    capped = sorted(name for name, outcome in result.folds.items() if not outcome.converged)
    evaluations = [outcome.evaluations for outcome in result.folds.values()]
    text = (f"{len(result.folds) - len(capped)} of {len(result.folds)} leave-one-publisher-out fits converged "
            f"(a step lowered the cost by under {FIT_FTOL:.1%} of it; {min(evaluations)}-{max(evaluations)} "
            "evaluations each")  # fmt: skip
    return text + (f"; stopped at the cap of evaluations: {', '.join(capped)})." if capped else ").")


def efficiency_yaml(result: CorpusFit, engine: str, source: str) -> str:
    """The ``efficiency:`` block of one engine profile holding the fitted scales, each with ``source`` and
    the factors it is the product of (with the rows each rests on)."""
    pairs = list(zip(result.params, result.values, strict=True))

    def cite(atom: Atom) -> str:
        factors = [f"{p.label} {v:.3g} ({result.num_rows[p.label]} rows)" for p, v in pairs if p.applies(atom)]
        return f"{source}; " + " x ".join(factors)

    text = ""
    for param, value in pairs:
        if param.engine == engine and param.kind in FRONTEND_FIELDS:
            rows, name = result.num_rows[param.label], FRONTEND_FIELDS[param.kind]
            text += f'{name}:\n  value: {value:.4g}\n  source: "{source}; {rows} served rows"\n'
    families: dict[str, list[str]] = {}
    for atom, value in atom_scales(result.params, result.values, engine).items():
        for name in SCALE_FIELDS[atom[2]]:
            line = f'    {name}:\n      value: {value:.4g}\n      source: "{cite(atom)}"'
            families.setdefault(atom[1], []).append(line)
    if families:
        text += "efficiency:\n"
    for family in FAMILIES:
        if family in families:
            text += f"  {family}:\n" + "\n".join(families[family]) + "\n"
    return text


def write_efficiency(result: CorpusFit, catalogue_root: Path, source: str) -> list[Path]:
    """Replace (or add) the ``efficiency:`` block of each fitted engine's YAML file under ``catalogue_root``."""
    written = []
    catalogue = Catalogue(catalogue_root)
    for engine in sorted({p.engine for p in result.params if p.engine is not None}):
        name = catalogue.engine(engine).name
        path = next(p for p in sorted((catalogue_root / "engines").glob("*.yaml")) if _profile_name(p) == name)
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"^efficiency:\n(?:[ #].*\n|\n)*", "", text, flags=re.MULTILINE)
        for name in FRONTEND_FIELDS.values():
            text = re.sub(rf"^{name}:\n(?:[ #].*\n)*", "", text, flags=re.MULTILINE)
        path.write_text(text.rstrip("\n") + "\n" + efficiency_yaml(result, engine, source), encoding="utf-8")
        written.append(path)
    return written


def _profile_name(path: Path) -> str:
    found = re.search(r"^name:\s*(\S+)", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return found.group(1) if found else ""
