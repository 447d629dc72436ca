"""Score the cost model on measured kernel samples, and produce the calibration of each GPU.

:func:`calibrate` fits every measured GPU on the training half of its samples (GEMMs first, then
element-wise kernels, prefill and decode attention, all-reduce: each later fit uses the earlier
values). :func:`score` prices every sample with a GPU spec and :func:`mape_table` summarises the
held-out half per GPU and op group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from clustersim.architecture import GpuSpec
from clustersim.config.profiles import HardwareProfile
from clustersim.validation.fit import (
    FitResult,
    apply,
    fit_all_reduce,
    fit_decode_attention,
    fit_elementwise,
    fit_gemms,
    fit_prefill_attention,
)
from clustersim.validation.kernels import GROUPS, MEASURED_PREFIX, KernelSample, held_out


@dataclass(frozen=True, slots=True)
class Calibration:
    """One GPU's fitted values, each with the fit that produced it (and the GPU it was measured on)."""

    gpu: str
    values: dict[str, float]
    fits: dict[str, tuple[str, FitResult]]


def _train(
    samples: Sequence[KernelSample], split: Mapping[tuple[str, str, tuple[float, ...]], bool], gpu: str, group: str
) -> list[KernelSample]:
    return [s for s in samples if s.gpu == gpu and s.group == group and not split[(s.gpu, s.group, s.key)]]


class _Recorder:
    """Collects fitted values and which fit produced each, applying them to a running spec."""

    def __init__(self, spec: GpuSpec) -> None:
        self.spec = spec
        self.values: dict[str, float] = {}
        self.fits: dict[str, tuple[str, FitResult]] = {}

    def record(self, fit: FitResult, source_gpu: str) -> None:
        self.values.update(fit.values)
        for key in fit.values:
            self.fits[key] = (source_gpu, fit)
        self.spec = apply(self.spec, fit.values)


def published_keys(profile: HardwareProfile) -> frozenset[str]:
    """The fitted fields whose value in ``profile`` comes from a publication, not from this fit (a GPU
    without kernel measurements then keeps it rather than borrowing another GPU's fit)."""
    keys = set()
    for key in _FIT_GROUP:
        cited = getattr(profile, key, None)
        if cited is not None and "validate-cost" not in cited.source:
            keys.add(key)
    return frozenset(keys)


def calibrate(
    samples: Sequence[KernelSample], gpus: Mapping[str, GpuSpec], keep: Mapping[str, frozenset[str]] | None = None
) -> dict[str, Calibration]:
    """Fit every GPU in ``gpus`` that has samples.

    A GPU without attention samples gets the attention fractions fitted on one that has them
    (the fit is redone against that GPU's own peaks, so the fractions carry over, not the times),
    except the fields in ``keep[gpu]`` (values cited from a publication, see :func:`published_keys`):
    a group with such a field is not fitted on the GPU's own vidur samples either, only on kernels
    measured in this repository (``validation/kernels``: the engine-class kernel timed on that GPU).
    A GPU whose GEMMs were timed here fits its GEMM curve on those alone (:func:`fitted_samples`).
    """
    keep = keep or {}
    split = held_out(samples)
    fitted = fitted_samples(samples)
    results: dict[str, Calibration] = {}
    # GPUs with attention data first, so others can borrow their fits
    order = sorted(gpus, key=lambda g: not _train(samples, split, g, "attention_decode"))
    for name in order:
        linear = _train(fitted, split, name, "linear")
        if not linear:
            continue
        rec = _Recorder(gpus[name])
        gemms = [(g, t) for s in linear for g, t in zip(s.gemms, s.gemm_times_s, strict=True)]
        rec.record(fit_gemms(gemms, rec.spec), name)
        elementwise = _train(samples, split, name, "elementwise")
        if elementwise:
            rec.record(fit_elementwise(elementwise, rec.spec), name)
        for group, fitter in (("attention_prefill", fit_prefill_attention), ("attention_decode", fit_decode_attention)):
            own = _train(samples, split, name, group)
            measured_here = any(s.source.startswith(MEASURED_PREFIX) for s in own)
            if not measured_here and any(_FIT_GROUP[key] == group for key in keep.get(name, frozenset())):
                continue  # priced from a publication: its own kernel timings score it, they do not refit it
            if own:
                rec.record(fitter(own, rec.spec), name)
                continue
            donors = [g for g in results if _train(samples, split, g, group)]
            if donors:
                donor = results[donors[0]]
                for key, (_, fit) in donor.fits.items():
                    if _FIT_GROUP[key] == group and key not in keep.get(name, frozenset()):
                        rec.record(FitResult({key: donor.values[key]}, fit.train_mape, fit.num_train), donor.gpu)
        reduce = _train(samples, split, name, "all_reduce")
        if reduce:
            rec.record(fit_all_reduce(reduce, rec.spec), name)
        results[name] = Calibration(name, rec.values, rec.fits)
    return results


def fitted_samples(samples: Sequence[KernelSample]) -> list[KernelSample]:
    """The samples the fits use: every one, except a GPU's vidur GEMM timings where its GEMMs were also
    timed in this repository (those ran the kernel library today's engines link; vidur's then only score).

    vidur's H100 timings (2024: PyTorch 2.1's cuBLAS) ran Llama-2-7B's projections at 128-512 tokens at
    355-690 TFLOP/s where today's cuBLAS runs Llama-3.1-8B's at 610-730 on the same part (and on an
    H200, the same die at the same power); a fit to both split the difference and priced H100 steps of
    128-512 tokens 10-31% slower than measured whole steps (``validation/kernels/layers``).
    """
    measured_here = {s.gpu for s in samples if s.group == "linear" and s.source.startswith(MEASURED_PREFIX)}
    return [
        s
        for s in samples
        if not (s.group == "linear" and s.gpu in measured_here and not s.source.startswith(MEASURED_PREFIX))
    ]


_FIT_GROUP = {
    "compute_efficiency_frac": "linear",
    "memory_efficiency_frac": "linear",
    "gemm_kernel_latency_s": "linear",
    "roofline_blend_exponent": "linear",
    "elementwise_kernel_latency_s": "elementwise",
    "prefill_attention_compute_efficiency_frac": "attention_prefill",
    "prefill_attention_latency_s": "attention_prefill",
    "prefill_attention_half_efficiency_tokens": "attention_prefill",
    "prefill_attention_half_occupancy_tiles": "attention_prefill",
    "decode_attention_memory_efficiency_frac": "attention_decode",
    "decode_attention_latency_s": "attention_decode",
    "decode_attention_half_occupancy_seqs": "attention_decode",
    "interconnect_latency_s": "all_reduce",
    "interconnect_efficiency_frac": "all_reduce",
}


def calibration_sources(
    calibration: Calibration, held_out_errors: Sequence[ErrorRow], files: Mapping[tuple[str, str], str]
) -> dict[str, tuple[float, str]]:
    """Each fitted value with a ``source:`` text saying what it was fitted on and the error reached.

    ``files`` maps (GPU, op group) to the measured files it was fitted on (for the text only).
    """
    out: dict[str, tuple[float, str]] = {}
    for key, value in calibration.values.items():
        donor, fit = calibration.fits[key]
        group = _FIT_GROUP[key]
        held = [r for r in held_out_errors if r.gpu == donor and r.group == group]
        held_text = "".join(
            f", held-out MAPE {r.mape_pct:.1f}% on {r.num_samples} rows"
            + (f" of {r.source.rsplit('/', 1)[-1]}" if len(held) > 1 else "")
            for r in held
        )
        borrowed = (
            ""
            if donor == calibration.gpu
            else f"no {group} kernels measured on {calibration.gpu}: fraction fitted on {donor}; "
        )
        vidur = "vidur_" in files.get((donor, group), "")
        tokens = ", vidur's num_tokens <= 4096" if vidur and group in ("linear", "elementwise") else ""
        out[key] = (
            value,
            f"{borrowed}fitted by `clustersim validate-cost --fit` on the training half (seeded random half of "
            f"distinct shapes, seed 20240601) of {group} rows in {files.get((donor, group), 'profiles/')}"
            f"{tokens}; bounded least squares on log(predicted / measured) over {fit.num_train} timings; "
            f"training MAPE {fit.train_mape * 100:.1f}%{held_text}",
        )
    return out


@dataclass(frozen=True, slots=True)
class ScoredSample:
    """One sample priced: what was measured, what the model says, and which half it is in."""

    gpu: str
    group: str
    num_tokens: int
    tensor_parallel: int
    held_out: bool
    measured_s: float
    predicted_s: float
    source: str = ""

    @property
    def abs_pct_error(self) -> float:
        return abs(self.predicted_s / self.measured_s - 1.0) * 100.0


def score(samples: Sequence[KernelSample], gpus: Mapping[str, GpuSpec]) -> list[ScoredSample]:
    """Price every sample whose GPU is in ``gpus``."""
    split = held_out(samples)
    return [
        ScoredSample(
            s.gpu,
            s.group,
            s.num_tokens,
            s.tensor_parallel,
            split[(s.gpu, s.group, s.key)],
            s.measured_s,
            s.predict_s(gpus[s.gpu]),
            s.source,
        )
        for s in samples
        if s.gpu in gpus
    ]


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """Mean absolute percentage error of one op group on one GPU from one measured file, over held-out samples."""

    gpu: str
    group: str
    num_samples: int
    mape_pct: float
    p90_ape_pct: float
    source: str = ""


def mape_table(scored: Sequence[ScoredSample], held_out_only: bool = True) -> list[ErrorRow]:
    """Per (GPU, op group, measured file) MAPE, in the order of :data:`GROUPS`."""
    errors: dict[tuple[str, str, str], list[float]] = {}
    for s in scored:
        if s.held_out or not held_out_only:
            errors.setdefault((s.gpu, s.group, s.source), []).append(s.abs_pct_error)
    order: dict[str, int] = {group: i for i, group in enumerate(GROUPS)}
    rows: list[ErrorRow] = []
    for gpu, group, source in sorted(errors, key=lambda k: (k[0], order[k[1]], k[2])):
        values = sorted(errors[(gpu, group, source)])
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        rows.append(ErrorRow(gpu, group, len(values), sum(values) / len(values), p90, source))
    return rows


def unfitted_files(samples: Sequence[KernelSample]) -> frozenset[tuple[str, str, str]]:
    """(GPU, op group, file) of the fitted groups' samples that only score a fit (:func:`fitted_samples`)."""
    kept = {(s.gpu, s.group, s.source) for s in fitted_samples(samples)}
    return frozenset((s.gpu, s.group, s.source) for s in samples if (s.gpu, s.group, s.source) not in kept)


def format_mape_table(
    rows: Sequence[ErrorRow], targets: Mapping[str, float], unfitted: frozenset[tuple[str, str, str]] = frozenset()
) -> str:
    """An aligned text table of :func:`mape_table` rows with each group's target (none for the files in
    ``unfitted``, which score a fit made on other timings of that GPU)."""
    lines = [f"{'gpu':<11}{'op group':<19}{'measured in':<42}{'samples':>8}{'MAPE %':>9}{'p90 %':>8}{'target %':>10}"]
    for row in rows:
        scored_only = (row.gpu, row.group, row.source) in unfitted
        target = None if scored_only else targets.get(row.group)
        if scored_only:
            mark = " (scores only)"
        elif target is None:
            mark = ""
        else:
            mark = " ok" if row.mape_pct <= target else " MISSED"
        target_text = "-" if target is None else f"{target:.0f}"
        source = row.source.rsplit("profiles/", 1)[-1].removeprefix(MEASURED_PREFIX)
        lines.append(
            f"{row.gpu:<11}{row.group:<19}{source:<42}{row.num_samples:>8}{row.mape_pct:>9.1f}{row.p90_ape_pct:>8.1f}"
            f"{target_text:>10}{mark}"
        )
    return "\n".join(lines)


def write_scored(scored: Sequence[ScoredSample], path: Path) -> Path:
    """Write scored samples as Parquet (the figure code reads only this)."""
    table = pa.table(
        {
            "gpu": [s.gpu for s in scored],
            "op_group": [s.group for s in scored],
            "num_tokens": [s.num_tokens for s in scored],
            "tensor_parallel": [s.tensor_parallel for s in scored],
            "held_out": [s.held_out for s in scored],
            "measured_s": [s.measured_s for s in scored],
            "predicted_s": [s.predicted_s for s in scored],
            "source": [s.source for s in scored],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
