"""Fit a GPU's efficiencies and latencies on the training half of its measured kernel samples.

Each fit minimises the squared log ratio of predicted to measured time (so a 10% miss on a 5 us
kernel counts as much as on a 5 ms one) with bounded least squares. The model being fitted is the
cost model's own formula, evaluated in vectorised form here for speed; :mod:`.report` then
scores the fitted values through the cost model's real functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from clustersim.architecture import GpuSpec
from clustersim.cost.ops import Gemm
from clustersim.validation.kernels import KernelSample

Array = NDArray[np.float64]
US = 1e-6


@dataclass(frozen=True, slots=True)
class FitResult:
    """Fitted values (hardware-profile field -> value) and the training error they reached."""

    values: dict[str, float]
    train_mape: float
    num_train: int


def _solve(
    residual_model: Callable[[Array], Array],
    measured: Array,
    start: Sequence[float],
    low: Sequence[float],
    high: Sequence[float],
) -> tuple[Array, float]:
    def residuals(x: Array) -> Array:
        return np.asarray(np.log(residual_model(x) / measured), dtype=float)

    result = least_squares(residuals, np.asarray(start, dtype=float), bounds=(low, high))
    mape = float(np.mean(np.abs(residual_model(result.x) / measured - 1.0)))
    return np.asarray(result.x, dtype=float), mape


def _blend(compute: Array, memory: Array, exponent: float) -> Array:
    top = np.maximum(compute, memory)
    return np.asarray(top * ((compute / top) ** exponent + (memory / top) ** exponent) ** (1.0 / exponent), dtype=float)


def fit_gemms(gemms: Sequence[tuple[Gemm, float]], gpu: GpuSpec) -> FitResult:
    """Compute and memory efficiency, per-GEMM latency and the roofline blend exponent (16-bit GEMMs)."""
    flops = np.array([g.flops() for g, _ in gemms])
    num_bytes = np.array([g.bytes(2.0, 2.0) for g, _ in gemms])
    measured = np.array([t for _, t in gemms])

    def model(x: Array) -> Array:
        compute = flops / (gpu.peak_flops_per_s * x[0])
        memory = num_bytes / (gpu.hbm_bandwidth_bytes_per_s * x[1])
        return np.asarray(x[2] * US + _blend(compute, memory, x[3]), dtype=float)

    x, mape = _solve(model, measured, [0.75, 0.8, 3.0, 2.0], [0.2, 0.2, 0.0, 1.0], [1.0, 1.0, 50.0, 20.0])
    values = {
        "compute_efficiency_frac": float(x[0]),
        "memory_efficiency_frac": float(x[1]),
        "gemm_kernel_latency_s": float(x[2]) * US,
        "roofline_blend_exponent": float(x[3]),
    }
    return FitResult(values, mape, len(gemms))


def fit_elementwise(samples: Sequence[KernelSample], gpu: GpuSpec) -> FitResult:
    """Per-kernel latency of the element-wise kernels (bandwidth from the GEMM fit)."""
    kernels = np.array([s.work.num_kernels if s.work else 0 for s in samples], dtype=float)
    num_bytes = np.array([s.work.bytes if s.work else 0.0 for s in samples])
    measured = np.array([s.measured_s for s in samples])
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac

    def model(x: Array) -> Array:
        return np.asarray(kernels * x[0] * US + num_bytes / bandwidth, dtype=float)

    x, mape = _solve(model, measured, [2.0], [0.0], [50.0])
    return FitResult({"elementwise_kernel_latency_s": float(x[0]) * US}, mape, len(samples))


def fit_prefill_attention(samples: Sequence[KernelSample], gpu: GpuSpec) -> FitResult:
    """Attention compute efficiency (plateau), the key length at half of it, the query blocks at half of it,
    and per-kernel latency.

    The model is :func:`clustersim.cost.roofline.prefill_attention_layer_time`'s:
    ``latency + max((flops + h x flops_per_key) / (peak x frac) x (T + t) / T, memory)``.
    """
    flops = np.array([s.work.flops if s.work else 0.0 for s in samples])
    per_key = np.array([s.work.flops_per_key if s.work else 0.0 for s in samples])
    tiles = np.array([s.work.query_tiles if s.work else 0.0 for s in samples])
    num_bytes = np.array([s.work.bytes if s.work else 0.0 for s in samples])
    measured = np.array([s.measured_s for s in samples])
    memory = num_bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac)
    occupied = tiles > 0

    def model(x: Array) -> Array:
        compute = (flops + x[2] * per_key) / (gpu.peak_flops_per_s * x[0])
        slow = np.where(occupied, (tiles + x[3]) / np.where(occupied, tiles, 1.0), 1.0)
        return np.asarray(x[1] * US + np.maximum(compute * slow, memory), dtype=float)

    start = [0.5, 10.0, gpu.prefill_attention_half_efficiency_tokens, 10.0]
    x, mape = _solve(model, measured, start, [0.05, 0.0, 0.0, 0.0], [1.0, 200.0, 8192.0, 5000.0])
    values = {
        "prefill_attention_compute_efficiency_frac": float(x[0]),
        "prefill_attention_latency_s": float(x[1]) * US,
        "prefill_attention_half_efficiency_tokens": float(x[2]),
        "prefill_attention_half_occupancy_tiles": float(x[3]),
    }
    return FitResult(values, mape, len(samples))


def fit_decode_attention(samples: Sequence[KernelSample], gpu: GpuSpec) -> FitResult:
    """Decode attention bandwidth efficiency, latency and the half-occupancy batch size."""
    flops = np.array([s.work.flops if s.work else 0.0 for s in samples])
    num_bytes = np.array([s.work.bytes if s.work else 0.0 for s in samples])
    seqs = np.array([s.num_seqs for s in samples], dtype=float)
    measured = np.array([s.measured_s for s in samples])
    efficiency = gpu.prefill_attention_compute_efficiency_frac or gpu.compute_efficiency_frac
    compute = flops / (gpu.peak_flops_per_s * efficiency)

    def model(x: Array) -> Array:
        occupancy = seqs / (seqs + x[2])
        return np.asarray(
            x[1] * US + np.maximum(compute, num_bytes / (gpu.hbm_bandwidth_bytes_per_s * x[0] * occupancy)), dtype=float
        )

    x, mape = _solve(model, measured, [0.7, 10.0, 1.0], [0.05, 0.0, 0.0], [1.0, 200.0, 256.0])
    values = {
        "decode_attention_memory_efficiency_frac": float(x[0]),
        "decode_attention_latency_s": float(x[1]) * US,
        "decode_attention_half_occupancy_seqs": float(x[2]),
    }
    return FitResult(values, mape, len(samples))


def fit_all_reduce(samples: Sequence[KernelSample], gpu: GpuSpec) -> FitResult:
    """Per-collective latency and the fraction of link bandwidth a ring all-reduce reaches."""
    num_bytes = np.array([s.message_bytes for s in samples])
    workers = np.array([s.tensor_parallel for s in samples], dtype=float)
    measured = np.array([s.measured_s for s in samples])
    ring = 2.0 * (workers - 1.0) / workers

    def model(x: Array) -> Array:
        return np.asarray(x[0] * US + ring * num_bytes / (gpu.interconnect_bandwidth_bytes_per_s * x[1]), dtype=float)

    x, mape = _solve(model, measured, [20.0, 0.8], [0.0, 0.05], [500.0, 1.0])
    values = {"interconnect_latency_s": float(x[0]) * US, "interconnect_efficiency_frac": float(x[1])}
    return FitResult(values, mape, len(samples))


def apply(gpu: GpuSpec, values: dict[str, float]) -> GpuSpec:
    """``gpu`` with fitted fields replaced."""
    return replace(gpu, **values)  # type: ignore[arg-type]
