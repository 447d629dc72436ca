"""Samples from ``scripts/measure_layer_kernels.py`` tables (``validation/kernels/layers/``).

Three groups, scored and never fitted (:data:`clustersim.validation.kernels.SCORED_ONLY`):

* ``elementwise_fused``: one fused kernel between the GEMMs (add+RMSNorm, SiLU-and-multiply,
  rotary), priced as one element-wise kernel moving the bytes the table gives;
* ``moe``: one MoE layer's routed experts (its up and down grouped GEMMs, summed; BF16 or FP8 weights),
  priced by the fused-MoE term from the model's own expected experts touched;
* ``step``: a whole decode or prefill step through every layer (a CUDA graph), priced as the step's
  layer kernels (:func:`clustersim.cost.roofline.kernel_time_s`); each step was timed with each of
  PyTorch's cuDNN and FlashAttention-2 attention kernels, and the faster stands for the engine's (as
  the single attention kernels' fastest backend does in :func:`~clustersim.validation.kernels.measured_samples`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from clustersim.architecture import ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.cost.base import StepBatch
from clustersim.cost.ops import Work, moe_experts_work
from clustersim.errors import ConfigError
from clustersim.validation.kernels import MEASURED_PREFIX, KernelSample, measured_gpu

_COLUMNS = ("kernel", "model", "tensor_parallel", "m_tokens", "kv_len", "bytes", "median_s", "note")
_ELEMENTWISE = ("ew_add_rmsnorm", "ew_silu_mul", "ew_rope")


def _frame(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    missing = set(_COLUMNS) - set(frame.columns)
    if missing:
        raise ConfigError(str(path), ", ".join(sorted(missing)), "missing columns of a measured layer-kernel table")
    frame["median_s"] = pd.to_numeric(frame["median_s"], errors="coerce")
    return frame[frame["median_s"].notna() & (frame["median_s"] > 0)]  # a failed timing leaves it empty


def _model(catalogue: Catalogue, name: str, precision: str, path: Path) -> ModelShape:
    if precision == "bf16":
        return ModelShape.from_profile(catalogue.model(name, source=str(path)), weight_precision="bf16")
    if precision == "fp8":
        return ModelShape.from_profile(catalogue.model(name, source=str(path)), weight_precision="fp8")
    raise ConfigError(str(path), "note", f"{precision!r} is not a weight precision (bf16 or fp8)")


def _elementwise(gpu: str, frame: pd.DataFrame, source: str) -> list[KernelSample]:
    rows = frame[frame["kernel"].isin(_ELEMENTWISE)]
    return [
        KernelSample(
            gpu,
            "elementwise_fused",
            (float(_ELEMENTWISE.index(r.kernel)), float(r.m_tokens), float(r.width), float(r.tensor_parallel)),
            float(r.median_s),
            int(r.m_tokens),
            int(r.tensor_parallel),
            work=Work(0.0, float(r.bytes), 1),
            source=source,
        )
        for r in rows.itertuples()
    ]


_MOE_KERNELS = {"bf16": ("moe_up", "moe_down"), "fp8": ("moe_up_fp8", "moe_down_fp8")}


def _moe(gpu: str, frame: pd.DataFrame, source: str, catalogue: Catalogue, path: Path) -> list[KernelSample]:
    samples = []
    for precision, kernels in _MOE_KERNELS.items():
        rows = frame[frame["kernel"].isin(kernels)]
        for (name, tp, tokens), pair in rows.groupby(["model", "tensor_parallel", "m_tokens"]):
            if len(pair) != 2:  # one of the two GEMMs failed: the layer is not measured
                continue
            model = _model(catalogue, str(name), precision, path)
            work = moe_experts_work(int(tokens), model, int(tp))
            key = (
                float(model.num_experts),
                float(model.hidden_size),
                float(tp),
                float(tokens),
                float(precision == "fp8"),
            )
            sample = KernelSample(gpu, "moe", key, float(pair["median_s"].sum()), int(tokens), int(tp), model)
            samples.append(replace(sample, work=work, source=source))
    return samples


def _steps(gpu: str, frame: pd.DataFrame, source: str, catalogue: Catalogue, path: Path) -> list[KernelSample]:
    steps = frame[frame["kernel"].isin(("decode_step", "prefill_step"))]
    case = ["kernel", "model", "tensor_parallel", "m_tokens", "kv_len", "note"]
    fastest = steps.loc[steps.groupby(case)["median_s"].idxmin()]  # each step with its faster attention kernel
    samples = []
    for r in fastest.itertuples():
        precision = str(r.note).split(";")[0].strip()
        model = _model(catalogue, str(r.model), precision, path)
        tokens, kv_len, tp = int(r.m_tokens), int(r.kv_len), int(r.tensor_parallel)
        prefill = r.kernel == "prefill_step"
        batch = (
            StepBatch((tokens,), (0,))
            if prefill
            else StepBatch(num_decode_seqs=tokens, decode_context_tokens=tokens * kv_len)
        )
        key = (
            float(prefill),
            float(model.hidden_size),
            float(tp),
            float(tokens),
            float(kv_len),
            float(precision == "fp8"),
        )
        samples.append(
            KernelSample(gpu, "step", key, float(r.median_s), tokens, tp, model, source=source, batch=batch)
        )  # fmt: skip
    return samples


def layer_samples(path: Path, catalogue: Catalogue | None = None) -> list[KernelSample]:
    """Every scored sample of one layer-kernel table (its ``NAME.environment.json`` names the GPU)."""
    catalogue = catalogue or Catalogue.builtin()
    gpu = measured_gpu(path)
    frame = _frame(path)
    source = f"{MEASURED_PREFIX}layers/{path.name}"
    return [
        *_elementwise(gpu, frame, source),
        *_moe(gpu, frame, source, catalogue, path),
        *_steps(gpu, frame, source, catalogue, path),
    ]
