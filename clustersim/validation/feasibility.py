"""Published latencies that no GPU could produce: a check on corpus rows, independent of any fit.

A closed-loop benchmark whose clients all send at once (``vllm bench serve`` and SGLang's
``bench_serving`` with ``--max-concurrency`` and an infinite request rate) starts with a wave of that many
prompts, and the last of them cannot see its first token before the whole wave is prefilled. Even at
every GPU's datasheet peak, the linear layers alone need two FLOPs per active parameter (outside the
embeddings) per prompt token. A row whose published p99 TTFT is well under that floor, while the wave
holds more than its slowest 1% of requests, was not measured from a cold cache: its prompts were served
in part from a prefix cache (a benchmark drawing its prompts from a fixed seed meets its earlier runs'
prompts on the same server). Such a row keeps only its throughputs (``prefix_cache_hits``); no cost
model can be fitted to its latencies, and one that is must not be. Where the benchmark's own prompt
lengths are known, the bound is exact and needs no margin (:func:`known_wave_floor_s`).
"""

from __future__ import annotations

import math

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.rowscenario import earlier_run_draws, lookup_hardware, resolve_model, sglang_random_draws

# the published p99 must be under this share of the floor: the wave's lengths are random draws, and a
# uniform draw of a few dozen prompts can fall well below its mean
FLOOR_MARGIN = 0.5


def _seconds_per_prompt_token(row: CorpusRow, catalogue: Catalogue) -> float | None:
    """The least prefill time per prompt token of the row's deployment: its linear layers' FLOPs at every
    GPU's datasheet peak (None: its model, GPU or precision unknown)."""
    name = resolve_model(row.model, catalogue)
    hardware = lookup_hardware(row.gpu, catalogue)
    if hardware is None or name is None or row.weight_precision not in (None, "bf16", "fp16", "fp8", "fp4"):
        return None
    shape = ModelShape.from_profile(catalogue.model(name))
    if row.weight_precision is not None:
        shape = shape.with_precision(row.weight_precision, None)  # type: ignore[arg-type]
    peak = GpuSpec.from_profiles(hardware, catalogue.engine("vllm")).gemm_peak_flops_per_s(shape.weight_precision)
    linear_params = shape.num_active_params() - shape.embedding_params()
    return 2.0 * linear_params / (peak * row.num_gpus)


def first_wave_floor_s(row: CorpusRow, catalogue: Catalogue) -> float | None:
    """The least time the first wave's last prompt waits for its first token, at every GPU's datasheet
    peak (None: not a closed loop, or its model, GPU or lengths unknown)."""
    if row.load_kind != "concurrency" or row.load is None or row.prompt_tokens is None:
        return None
    per_token_s = _seconds_per_prompt_token(row, catalogue)
    return None if per_token_s is None else max(1, round(row.load)) * row.prompt_tokens * per_token_s


def known_wave_floor_s(row: CorpusRow, catalogue: Catalogue) -> tuple[float, int] | None:
    """Where the benchmark's prompt lengths are known (``sglang-random-IN-OUT`` rows): the least the
    published p99 TTFT can be, and of how many of the first wave's prompts, or None.

    numpy's 99th percentile of ``n`` values is at least the ``k``-th largest, ``k = n - floor(0.99 (n -
    1))``; the ``k``-th largest TTFT is at least the ``k``-th largest of the first wave's, which comes no
    sooner than the wave's ``clients - k + 1`` shortest prompts are prefilled, less what a prefix cache
    can hold of them before the run (:func:`_cached_tokens`). No margin is needed."""
    if row.load_kind != "concurrency" or row.load is None or row.num_requests is None:
        return None
    num, clients = row.num_requests, max(1, round(row.load))
    drawn = sglang_random_draws(row.dataset, num)
    per_token_s = _seconds_per_prompt_token(row, catalogue)
    kth = num - math.floor(0.99 * (num - 1))
    if drawn is None or per_token_s is None or kth > min(clients, num):
        return None
    cached = _cached_tokens(row, drawn[0])
    uncached = [prompt - min(prompt, hit) for prompt, hit in zip(drawn[0], cached, strict=True)]
    counted = min(clients, num) - kth + 1
    return sum(sorted(uncached[:clients])[:counted]) * per_token_s, counted


def _cached_tokens(row: CorpusRow, prompts: list[int]) -> list[int]:
    """The most of each prompt a prefix cache can hold before the run: what the row's ``earlier_runs``
    sent of the same document (all of it kept), and all of request 0's (the warm-up request sent it)."""
    num = len(prompts)
    cached = [0] * num
    for earlier, _ in earlier_run_draws(row):
        for i, tokens in enumerate(earlier[:num]):
            cached[i] = max(cached[i], tokens)
    cached[0] = prompts[0]
    return cached


def infeasible_ttft(row: CorpusRow, catalogue: Catalogue) -> str | None:
    """Why the row's published p99 TTFT cannot be a cold-cache measurement, or None."""
    published_ms = row.metrics.get("ttft_p99_ms")
    if published_ms is None or "prefix_cache_hits" in row.features:
        return None
    known = known_wave_floor_s(row, catalogue)
    if known is not None:
        if published_ms / 1e3 >= known[0]:
            return None
        return (
            f"published p99 TTFT {published_ms:.0f} ms, but the {known[1]} shortest prompts of its first wave "
            f"need {known[0]:.2f} s of prefill at the datasheet peak: prompts served from a prefix cache?"
        )
    floor_s = first_wave_floor_s(row, catalogue)
    if floor_s is None:
        return None
    clients = max(1, round(row.load or 1))
    slowest = math.ceil(0.01 * (row.num_requests or clients))
    if slowest > clients // 2 or published_ms / 1e3 >= FLOOR_MARGIN * floor_s:
        return None
    return (
        f"published p99 TTFT {published_ms:.0f} ms, but the first wave of {clients} prompts needs "
        f"{floor_s:.2f} s of prefill at the datasheet peak: prompts served from a prefix cache?"
    )
