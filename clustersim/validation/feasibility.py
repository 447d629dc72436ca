"""Published latencies that no GPU could produce: a check on corpus rows, independent of any fit.

A closed-loop benchmark whose clients all send at once (``vllm bench serve`` and SGLang's
``bench_serving`` with ``--max-concurrency`` and an infinite request rate) starts with a wave of that many
prompts, and the last of them cannot see its first token before the whole wave is prefilled. Even at
every GPU's datasheet peak, the linear layers alone need two FLOPs per active parameter (outside the
embeddings) per prompt token. A row whose published p99 TTFT is well under that floor, while the wave
holds more than its slowest 1% of requests, was not measured from a cold cache: its prompts were served
in part from a prefix cache (a benchmark drawing its prompts from a fixed seed meets its earlier runs'
prompts on the same server). Such a row keeps only its throughputs (``prefix_cache_hits``); no cost
model can be fitted to its latencies, and one that is must not be.
"""

from __future__ import annotations

import math

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.errors import ConfigError
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.rowscenario import resolve_model

# the published p99 must be under this share of the floor: the wave's lengths are random draws, and a
# uniform draw of a few dozen prompts can fall well below its mean
FLOOR_MARGIN = 0.5


def first_wave_floor_s(row: CorpusRow, catalogue: Catalogue) -> float | None:
    """The least time the first wave's last prompt waits for its first token, at every GPU's datasheet
    peak (None: not a closed loop, or its model, GPU or lengths unknown)."""
    if row.load_kind != "concurrency" or row.load is None or row.prompt_tokens is None:
        return None
    name = resolve_model(row.model, catalogue)
    try:
        hardware = catalogue.hardware(row.gpu)
    except ConfigError:
        return None
    if name is None or row.weight_precision not in (None, "bf16", "fp16", "fp8", "fp4"):
        return None
    shape = ModelShape.from_profile(catalogue.model(name))
    if row.weight_precision is not None:
        shape = shape.with_precision(row.weight_precision, None)  # type: ignore[arg-type]
    peak = GpuSpec.from_profiles(hardware, catalogue.engine("vllm")).gemm_peak_flops_per_s(shape.weight_precision)
    linear_params = shape.num_active_params() - shape.embedding_params()
    wave_tokens = max(1, round(row.load)) * row.prompt_tokens
    return wave_tokens * 2.0 * linear_params / (peak * row.num_gpus)


def infeasible_ttft(row: CorpusRow, catalogue: Catalogue) -> str | None:
    """Why the row's published p99 TTFT cannot be a cold-cache measurement, or None."""
    published_ms = row.metrics.get("ttft_p99_ms")
    floor_s = first_wave_floor_s(row, catalogue)
    if published_ms is None or floor_s is None or "prefix_cache_hits" in row.features:
        return None
    clients = max(1, round(row.load or 1))
    slowest = math.ceil(0.01 * (row.num_requests or clients))
    if slowest > clients // 2 or published_ms / 1e3 >= FLOOR_MARGIN * floor_s:
        return None
    return (
        f"published p99 TTFT {published_ms:.0f} ms, but the first wave of {clients} prompts needs "
        f"{floor_s:.2f} s of prefill at the datasheet peak: prompts served from a prefix cache?"
    )
