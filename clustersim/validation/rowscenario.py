"""A corpus row as the scenario that re-runs its benchmark, or the reason it cannot be simulated.

The scenario is the benchmark the row describes (:mod:`clustersim.validation.corpus`):

- ``offline`` and ``rate: inf``: every request queued at t=0 (``trtllm-bench``, ``vllm bench
  throughput``, MLPerf Offline, ``--request-rate inf``);
- ``concurrency``: a closed loop of ``load`` clients with no think time, all starting at t=0
  (``--max-concurrency``), unless the row states its client's wait between requests
  (``client_gap=<ms>/<us per prompt token>``);
- ``rate``: Poisson arrivals at ``load`` requests per second (``--request-rate``; MLPerf Server);
- ``batch``: ``load`` requests at t=0 that run as one batch (``max_num_seqs`` at least ``load``).

Lengths are fixed for synthetic (``random``) rows, and uniform within ``R`` of them for
``random-range-R`` rows (``vllm bench serve --random-range-ratio R``), spread evenly over that range in a
shuffled order (:func:`stratified_uniform`: the published mean is the run's); ``sglang-random-IN-OUT`` rows
replay the lengths ``sglang.bench_serving`` drew, in its order (:func:`sglang_random_lengths`); a named
dataset with published mean lengths draws from a lognormal shape with those means (:data:`DATASET_SHAPES`).
The engine profile brings its scheduler defaults, unless the row states ``max_num_seqs`` or
``max_num_batched_tokens``.
Requests served over HTTP (``concurrency`` and ``rate``) pass the engine's front end; offline ones
(the engine's Python or C++ API) do not. Served over several data-parallel replicas, they are spread by
the rule the row states (``dispatch=<rule>``: its harness's published rule, or the engine's own where one
endpoint serves every replica, as ``vllm serve --data-parallel-size``), else round robin (assumed).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from clustersim.architecture import ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import HardwareProfile, ModelProfile
from clustersim.config.releases import release_numbers
from clustersim.config.scenario import KVCache
from clustersim.validation.benchtools import TRTLLM_BENCH_KV_FRAC, BenchSettings, trtllm_bench_settings
from clustersim.validation.corpus import RANGE_DATASET, SGLANG_RANDOM_DATASET, CorpusRow

ALL_AT_ONCE_RATE_PER_S = 1.0e6  # "infinite" rate: N requests queued within N microseconds
DEFAULT_NUM_REQUESTS = {"offline": 1000, "batch": 0, "concurrency": 1000, "rate": 1000}
MIN_REQUESTS_PER_CLIENT = 4
MAX_OFFLINE_REQUESTS = 30000
MAX_SIMULATED_REQUESTS = 20000
MIN_STEADY_REQUESTS = 2000
STEADY_FACTOR = 4.0
# a row run at the highest rate meeting p99 bounds (MLPerf Server) runs long enough that a deployment
# falling this share short of its arrivals queues past the TTFT bound: a shorter run meets the p99s while
# falling behind, where the benchmark's ten minutes would not
OVERLOAD_DETECT_FRAC = 0.02
MAX_BOUNDED_REQUESTS = 60000
SEED = 0
# uniform lengths of a run of at most this many requests are spread evenly over their range (stratified)
# rather than drawn; beyond it independent draws miss the mean by under 1.3% (one standard deviation)
MAX_STRATIFIED_REQUESTS = 2000
SGLANG_BENCH_SEED = 1  # sglang.bench_serving --seed, default
MEAN_LENGTH_TOLERANCE = 0.01  # published mean lengths are rounded to hundredths of a token
DEFAULT_BLOCK_TOKENS = KVCache.model_fields["block_size_tokens"].default
SGLANG_WARMUP_OUTPUT_TOKENS = 32  # bench_serving's warm-up request: request 0's prompt, at most 32 output tokens

# engine (as the corpus names it) -> (engine profile, oldest version it models)
ENGINES: dict[str, tuple[str, tuple[int, ...]]] = {
    "vllm": ("vllm-v1", (0, 8)),
    "sglang": ("sglang", (0, 4)),
    "trtllm": ("trtllm", (0, 17)),
}


@dataclass(frozen=True)
class LengthShape:
    """A dataset's length distribution at the row's mean lengths: ``lognormal`` with these sigmas (the
    median set so the mean is the row's), ``uniform`` from 1 to twice the mean, ``values``: prompts
    drawn from the dataset's own lengths (``prompt_values``, one entry per prompt), or ``sequence``: those
    lengths in the order the benchmark sent them; outputs of the
    row's length."""

    kind: str
    prompt_sigma: float
    output_sigma: float
    max_prompt_tokens: int
    max_output_tokens: int
    source: str
    prompt_values: tuple[int, ...] = ()


# coconut-labs/kvwarden's 200 mixed prompts in request order (a: 785 tokens, b: 3,089, c: 6,161, d: 12,305)
_KVWARDEN_LENGTHS = {"a": 785, "b": 3089, "c": 6161, "d": 12305}
_KVWARDEN_ORDER = (
    "bbbaabcabdbadaaaaccbdbbccacabcbaaaccacabdbbabacaaaababbabcadbbadcabadbaaaacacddcdcbaaadadbcbcacaca"
    "baacbbaaadbbabcbacdacacbdbbabcbccabbdcababadbbaadbcadbdabdaababaabbaddaaababbadbcaabaccdbaaaabbabdbaba"
)
DATASET_SHAPES: dict[str, LengthShape] = {
    "sharegpt": LengthShape(
        "lognormal",
        1.1,
        0.9,
        1024,
        2048,
        "assumption: ShareGPT is heavy-tailed with many short prompts (vLLM's benchmarks keep prompts <= 1024 "
        "tokens); the same shape as scenarios/published/vllm_ci_h200_l8b_tput.yaml",
    ),
    "openorca": LengthShape(
        "lognormal",
        0.65,
        0.65,
        1024,
        1024,
        "MLPerf llama2-70b OpenOrca prompts: lognormal sigma 0.65 below 1,024 tokens, fitted to a sample of the "
        "dataset's per-sample lengths (scenarios/published/mlperf41_*); outputs assumed the same shape",
    ),
    "kvwarden-mixed": LengthShape(
        "sequence",
        0.0,
        0.0,
        0,
        0,
        "coconut-labs/kvwarden's mixed workload: its per-request results (results/results_vllm_*_20260416_*/"
        "benchmarks/mixed/vllm_c*_run1.csv, tokens_in by request_id) hold 78 prompts of 785 tokens, 62 of "
        "3,089, 34 of 6,161 and 26 of 12,305 (mean 3,911), sent in the same order at every level and on both "
        "GPUs (its closed-loop client takes the list in order); replayed in that order",
        tuple(_KVWARDEN_LENGTHS[code] for code in _KVWARDEN_ORDER),
    ),
    "random-uniform": LengthShape(
        "uniform",
        0.0,
        0.0,
        1 << 20,
        1 << 20,
        "sglang.bench_serving --dataset-name random with its default --random-range-ratio 0: each length uniform "
        "from 1 to the nominal length",
    ),
}
GENERIC_SHAPE = LengthShape(
    "lognormal",
    0.7,
    0.7,
    32768,
    8192,
    "assumption: a dataset without a known shape, lognormal with sigma 0.7 at its means",
)
# deployments the corpus runner does not re-create, and why (the row's features)
UNMODELLED_FEATURES = {
    "dp_attention": "data-parallel attention is not modelled",
    "disaggregated": "the corpus runner does not lay out prefill and decode pools",
    "spec_decode": "speculative decoding needs the run's acceptance rate, which is not published",
}
FIXED_DATASETS = ("random", "fixed", "synthetic", "")


@dataclass(frozen=True)
class RowScenario:
    """A row's scenario (a raw mapping, validated when it runs) and what was assumed to build it."""

    row: CorpusRow
    mapping: dict[str, Any] | None
    skip_reason: str | None = None
    assumptions: tuple[str, ...] = ()
    steady: bool = False  # measured in the run's steady state (the run is shorter than the benchmark)
    replicas_per_run: int = 0  # a shortened offline run simulates one of its identical replicas (0: all of them)


_MODEL_SUFFIXES = re.compile(
    r"(-(instruct|chat|hf|base|it|fp8|fp4|nvfp4|mxfp4|awq|gptq|int4|w4a16|w8a8|dynamic|quantized|kv|v0\.\d))+$",
    re.IGNORECASE,
)
# models with another's shapes (the weights differ, the cost does not): Llama 3.3 70B is 3.1's architecture
# (its config.json differs only in rope scaling); Qwen2-7B has Qwen2.5-7B's (hidden 3584, 28 layers, 28/4 heads,
# FFN 18944, vocab 152064: both config.json files); DeepSeek-V3.1 is V3's ("The model structure of DeepSeek-V3.1
# is the same as DeepSeek-V3", its model card, huggingface.co/deepseek-ai/DeepSeek-V3.1: 671B total, 37B activated)
MODEL_SAME_ARCHITECTURE = {
    "deepseek-v3.1": "DeepSeek-V3",
    "llama-3.3-70b": "Llama-3.1-70B",
    "llama-3-8b": "Llama-3.1-8B",
    "llama-3-70b": "Llama-3.1-70B",
    "qwen2-7b": "Qwen2.5-7B",
}


def model_names(name: str) -> list[str]:
    """Names to look a corpus model up by: as given, without the organisation, without quantization
    and instruction-tuning suffixes, and the model of the same architecture (Llama 3.3 70B is 3.1's)."""
    bare = name.split("/")[-1]
    stem = _MODEL_SUFFIXES.sub("", bare)
    names = [name, bare, stem, re.sub(r"^meta-", "", stem, flags=re.IGNORECASE)]
    for key, same in MODEL_SAME_ARCHITECTURE.items():
        if stem.lower().replace("meta-", "") == key:
            names.append(same)
    return list(dict.fromkeys(names))


def resolve_model(name: str, catalogue: Catalogue) -> str | None:
    for candidate in model_names(name):
        found = catalogue.find("model", candidate)
        if found is not None:
            return found.name
    return None


def lookup_hardware(name: str, catalogue: Catalogue) -> HardwareProfile | None:
    """The hardware profile named ``name``, None if the catalogue has none (a broken one is an error)."""
    found = catalogue.find("hardware", name)
    assert found is None or isinstance(found, HardwareProfile)
    return found


def _precision(row: CorpusRow, hardware: HardwareProfile) -> tuple[str | None, str | None]:
    """The scenario's weight precision, or (None, reason) when it cannot be priced."""
    precision = row.weight_precision
    if precision in (None, "bf16", "fp16", "fp8"):
        return precision, None
    if precision == "fp4":
        return "fp4", None
    if precision == "int4":  # weight-only: 0.5 byte per weight, GEMMs at the 16-bit peak
        has_fp4 = hardware.peak_fp4_flops_per_s is not None and hardware.peak_fp4_flops_per_s.value is not None
        if has_fp4:
            return None, f"int4 weight-only on {hardware.name} (it has FP4 tensor cores; not modelled)"
        return "fp4", None
    return None, f"{precision} weights are not modelled"


def stratified_uniform(low: int, high: int, num: int, stream: int) -> list[int]:
    """``num`` lengths spread evenly over the integers ``low..high`` (the ``i``-th at the quantile
    ``(i + 0.5) / num``), in an order shuffled by the seed and ``stream``.

    A benchmark's published mean length is its own sample's; ``num`` independent draws would miss it (ten
    requests uniform up to 8,000 tokens by 18%, one standard deviation), and with it the prefill time of
    a run of a few requests. These lengths have the distribution's mean (to half a token) and its median.
    """
    span = high - low + 1
    values = [low + (span * (2 * i + 1)) // (2 * num) for i in range(num)]
    order = np.random.default_rng([SEED, stream]).permutation(num)
    return [values[i] for i in order]


def _uniform(low: int, high: int, num: int, stream: int) -> dict[str, Any]:
    """Uniform lengths on ``low..high`` for a run of ``num`` requests: stratified when it is short enough."""
    if num > MAX_STRATIFIED_REQUESTS or low == high:
        return {"kind": "uniform", "min_tokens": low, "max_tokens": high}
    return {"kind": "empirical", "values": stratified_uniform(low, high, num, stream), "order": "sequence"}


def sglang_random_lengths(
    prompt_len: int, output_len: int, num: int, outputs_from_zero: bool
) -> tuple[list[int], list[int]]:
    """The prompt and output lengths ``sglang.bench_serving --dataset-name random`` draws for ``num``
    requests at its defaults, in the order it sends them: numpy's global generator seeded with ``--seed 1``
    draws every prompt length uniform on ``[1, prompt_len]``, then every output length uniform on
    ``[1, output_len]`` (``[0, output_len]`` in releases that do not clip the low end at 1)
    (``sample_random_requests`` in sgl-project/sglang ``python/sglang/bench_serving.py``)."""
    draw = np.random.RandomState(SGLANG_BENCH_SEED)
    prompts = draw.randint(1, prompt_len + 1, size=num)
    outputs = draw.randint(0 if outputs_from_zero else 1, output_len + 1, size=num)
    return [int(v) for v in prompts], [int(v) for v in outputs]


def sglang_random_draws(dataset: str, num: int) -> tuple[list[int], list[int]] | None:
    """:func:`sglang_random_lengths` for a ``sglang-random-IN-OUT[-from0]`` dataset, or None for another."""
    match = SGLANG_RANDOM_DATASET.match(dataset)
    if match is None:
        return None
    return sglang_random_lengths(int(match.group(1)), int(match.group(2)), num, bool(match.group(3)))


def _sglang_random(
    row: CorpusRow, drawn_lengths: tuple[list[int], list[int]], num: int
) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """The lengths of a ``sglang-random-IN-OUT`` row, replayed in the order sent, or why not: the draws must
    give the published mean lengths (bench_serving's own totals), else the row did not run them."""
    prompts, outputs = drawn_lengths
    for name, drawn, published in (("prompt", prompts, row.prompt_tokens), ("output", outputs, row.output_tokens)):
        mean = sum(drawn) / num
        if published is not None and abs(mean - published) > MEAN_LENGTH_TOLERANCE:
            drew = f"{row.dataset} draws a mean {name} of {mean:.2f} tokens over {num} requests"
            return None, None, f"{drew}, not the published {published:g}"
    zeros = outputs.count(0)
    assumption = "sglang.bench_serving's seeded lengths, in the order sent"
    if zeros:
        assumption += f" ({zeros} output length(s) of 0 run as 1)"
    lengths = {
        "prompt_tokens": {"kind": "empirical", "values": prompts, "order": "sequence"},
        "output_tokens": {"kind": "empirical", "values": [max(1, v) for v in outputs], "order": "sequence"},
        "documents": {"earlier_runs": _earlier_runs(row, prompts[0], outputs[0])},
    }
    return lengths, assumption, None


def earlier_run_draws(row: CorpusRow) -> list[tuple[list[int], list[int]]]:
    """The prompt and output lengths of each run the row's ``earlier_runs`` names, oldest first, drawn as
    the row's own ``sglang-random-IN-OUT[-from0]`` dataset draws them."""
    match = SGLANG_RANDOM_DATASET.match(row.dataset)
    assert match is not None
    from_zero = bool(match.group(3))
    return [sglang_random_lengths(length, output, num, from_zero) for length, output, num in row.earlier_runs]


def _earlier_runs(row: CorpusRow, first_prompt: int, first_output: int) -> list[dict[str, list[int]]]:
    """What ran on the row's server before its measured requests, oldest first: the runs its
    ``earlier_runs`` feature names, then ``bench_serving``'s warm-up request (``benchmark`` in
    ``python/sglang/bench_serving.py``: request 0's prompt, at most 32 output tokens; the radix cache is
    flushed only with ``--flush-cache``)."""
    runs = [{"prompt_tokens": prompts, "output_tokens": outputs} for prompts, outputs in earlier_run_draws(row)]
    runs.append({"prompt_tokens": [first_prompt], "output_tokens": [min(first_output, SGLANG_WARMUP_OUTPUT_TOKENS)]})
    return runs


def _lengths(row: CorpusRow, num: int) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """The tenant's length distributions for a run of ``num`` requests, an assumption made (or None) and a
    skip reason (or None)."""
    if row.prompt_tokens is None or row.output_tokens is None:
        return None, None, "mean prompt and output lengths are not published"
    seeded = sglang_random_draws(row.dataset, num)
    if seeded is not None:
        return _sglang_random(row, seeded, num)
    prompt, output = max(1, round(row.prompt_tokens)), max(1, round(row.output_tokens))
    ranged = RANGE_DATASET.match(row.dataset)
    if ranged:
        ratio = float(ranged.group(1))

        def within(length: int, stream: int) -> dict[str, Any]:
            low, high = max(1, math.floor(length * (1 - ratio))), max(1, math.ceil(length * (1 + ratio)))
            return _uniform(low, high, num, stream)

        return {"prompt_tokens": within(prompt, 0), "output_tokens": within(output, 1)}, None, None
    if row.dataset in FIXED_DATASETS:
        fixed = {
            "prompt_tokens": {"kind": "fixed", "tokens": prompt},
            "output_tokens": {"kind": "fixed", "tokens": output},
        }
        return fixed, None, None
    shape = DATASET_SHAPES.get(row.dataset, GENERIC_SHAPE)

    if shape.kind in ("values", "sequence"):
        drawn_prompts: dict[str, Any] = {"kind": "empirical", "values": list(shape.prompt_values)}
        if shape.kind == "sequence":
            drawn_prompts["order"] = "sequence"
        return (
            {"prompt_tokens": drawn_prompts, "output_tokens": {"kind": "fixed", "tokens": output}},
            (f"{row.dataset} lengths: {shape.source}"),
            None,
        )

    def drawn(mean: int, sigma: float, cap: int, stream: int) -> dict[str, Any]:
        if shape.kind == "uniform":
            return _uniform(1, max(1, 2 * mean - 1), num, stream)
        median = max(1, round(mean / math.exp(sigma * sigma / 2.0)))
        return {
            "kind": "lognormal",
            "median_tokens": median,
            "sigma": sigma,
            "min_tokens": 1,
            "max_tokens": max(cap, 2 * mean),
        }

    lengths = {
        "prompt_tokens": drawn(prompt, shape.prompt_sigma, shape.max_prompt_tokens, 0),
        "output_tokens": drawn(output, shape.output_sigma, shape.max_output_tokens, 1),
    }
    return lengths, f"{row.dataset} lengths: {shape.source}", None


def _arrival(row: CorpusRow) -> tuple[dict[str, Any], int]:
    """The tenant's arrivals and how many requests run together at most (for ``max_num_seqs``)."""
    load = row.load
    if row.load_kind == "concurrency":
        assert load is not None
        users = max(1, round(load))
        think = {"kind": "fixed", "time_s": 0.0}
        loop: dict[str, Any] = {"kind": "closed_loop", "num_users": users, "think_time": think}
        if row.client_gap is not None:  # the client's own work on each request that ended, on one thread
            loop["client_time_per_request_s"], loop["client_time_per_prompt_token_s"] = row.client_gap
        return loop, 1
    if row.load_kind == "rate" and load is not None and math.isfinite(load):
        return {"kind": "poisson", "rate_per_s": load}, 1
    together = round(load) if row.load_kind == "batch" and load is not None else 1
    return {"kind": "poisson", "rate_per_s": ALL_AT_ONCE_RATE_PER_S}, together


def num_requests(row: CorpusRow) -> int:
    """Requests to simulate: the row's, else the benchmark tool's usual number; a long run (MLPerf's
    ten minutes, tens of thousands of queued requests) is cut to what reaches its steady state: for a
    Poisson row, four times the requests in flight by Little's law at the published mean latency."""
    wanted = row.num_requests or DEFAULT_NUM_REQUESTS[row.load_kind]
    if row.load_kind == "batch":
        return round(row.load or 1)
    if row.load_kind == "concurrency" and row.num_requests is None:
        wanted = max(wanted, MIN_REQUESTS_PER_CLIENT * round(row.load or 1))
    e2e_ms = row.metrics.get("e2e_mean_ms") or row.metrics.get("e2e_p50_ms")
    steady_rate = row.load_kind == "rate" and row.load is not None and math.isfinite(row.load)
    if steady_rate and row.p99_bounds_ms is not None:
        assert row.load is not None
        duration_s = max(STEADY_FACTOR * (e2e_ms or 0.0), row.p99_bounds_ms[0] / OVERLOAD_DETECT_FRAC) / 1e3
        return min(wanted, max(MIN_STEADY_REQUESTS, math.ceil(row.load * duration_s)), MAX_BOUNDED_REQUESTS)
    if steady_rate and e2e_ms is not None:
        assert row.load is not None
        in_flight = row.load * e2e_ms / 1e3
        return min(wanted, max(MIN_STEADY_REQUESTS, math.ceil(STEADY_FACTOR * in_flight)), MAX_SIMULATED_REQUESTS)
    return min(wanted, MAX_OFFLINE_REQUESTS)


def steady_window(row: CorpusRow, simulated: int) -> bool:
    """Whether the run is shorter than the benchmark, so its figures are measured in its steady state
    (the benchmark's own ramp-up and drain are a negligible part of its much longer run)."""
    return row.num_requests is not None and simulated < row.num_requests and row.load_kind in ("rate", "offline")


def _longest_prompt(lengths: dict[str, Any]) -> int:
    prompt = lengths["prompt_tokens"]
    if prompt["kind"] == "empirical":
        return int(max(prompt["values"]))
    return int(prompt["tokens"] if prompt["kind"] == "fixed" else prompt["max_tokens"])


def _trtllm_bench(
    row: CorpusRow, profile: ModelProfile, hardware: HardwareProfile, precision: str | None
) -> BenchSettings:
    """The batch limits ``trtllm-bench throughput`` picks for the row's model, GPUs and lengths."""
    model = ModelShape.from_profile(profile, precision, row.kv_precision)  # type: ignore[arg-type]
    reported = hardware.memory_reported_bytes
    memory = reported.value if reported is not None else hardware.memory_bytes.value
    return trtllm_bench_settings(model, memory, row.tp, row.pp, row.prompt_tokens or 1, row.output_tokens or 1)


def _trtllm_policy(row: CorpusRow, scheduler: dict[str, Any], longest_prompt: int, assumed: list[str]) -> None:
    """TensorRT-LLM's capacity policy and context chunking as the row ran them (its ``max_utilization`` and
    ``chunked_context`` features; ``trtllm-bench``'s own settings already in ``scheduler``)."""
    policy = scheduler.get("policy", "")
    max_util = "max_utilization" in row.features or policy.startswith("trtllm_max_utilization")
    chunked = "chunked_context" in row.features or policy.endswith("_chunked")
    budget = scheduler.get("max_num_batched_tokens")
    if not chunked and budget is not None and longest_prompt > budget:
        # a prompt longer than the token budget runs only in chunks (TensorRT-LLM refuses it otherwise)
        chunked = True
        assumed.append(f"prompts up to {longest_prompt} tokens over a {budget}-token budget: chunked context")
    if max_util or chunked:
        base = "trtllm_max_utilization" if max_util else "trtllm_no_evict"
        scheduler["policy"] = base + ("_chunked" if chunked else "")


def _documents_kv(
    row: CorpusRow, lengths: dict[str, Any], kv: dict[str, Any], catalogue: Catalogue, engine: str
) -> str | None:
    """Prompts cut from documents find what earlier runs left only in a prefix cache, matched per KV
    block: keep the documents where the engine caches prefixes (SGLang's radix cache, vLLM V1's), match
    at its block size, and say what the run assumes was cached (None: nothing, without a prefix cache)."""
    own = catalogue.engine(engine).kv
    if own is None or own.prefix_caching is None or not own.prefix_caching.value:
        del lengths["documents"]
        return None
    kv["prefix_block_tokens"] = (
        own.block_size_tokens.value if own.block_size_tokens is not None else DEFAULT_BLOCK_TOKENS
    )
    cached = "its warm-up request (request 0's prompt) ran just before, its prompt left in the prefix cache"
    if row.earlier_runs:
        runs = ", ".join(f"{n} x {i}/{o}" for i, o, n in row.earlier_runs)
        cached = f"the prefix cache holds what the server's earlier runs sent ({runs}, oldest first); {cached}"
    return cached


def row_scenario(row: CorpusRow, catalogue: Catalogue) -> RowScenario:
    """The scenario that re-runs ``row``'s benchmark, or why it cannot be simulated."""

    def skip(reason: str) -> RowScenario:
        return RowScenario(row, None, reason)

    engine = ENGINES.get(row.engine)
    if engine is None:
        return skip(f"engine '{row.engine}' has no profile")
    version = release_numbers(row.engine_version)
    if version is not None and version < engine[1]:
        return skip(f"{row.engine} {row.engine_version} is older than the modelled {'.'.join(map(str, engine[1]))}")
    hardware = lookup_hardware(row.gpu, catalogue)
    if hardware is None:
        return skip(f"no hardware profile for {row.gpu}")
    resolved = resolve_model(row.model, catalogue)
    if resolved is None:
        return skip(f"no model profile for {row.model}")
    model: str = resolved
    if row.ep > 1:
        return skip("expert parallelism is not modelled")
    for feature, why in UNMODELLED_FEATURES.items():
        if feature in row.features:
            return skip(why)
    if not row.comparable_metrics:
        return skip("its prompts repeat and it publishes only latencies, which prefix-cache hits decide")
    precision, reason = _precision(row, hardware)
    if reason is not None:
        return skip(reason)
    simulated = num_requests(row)
    lengths, assumption, reason = _lengths(row, simulated)
    if reason is not None:
        return skip(reason)
    assert lengths is not None
    arrival, together = _arrival(row)
    cluster: dict[str, Any] = {
        "num_replicas": row.dp,
        "hardware": hardware.name,
        "model": model,
        "tensor_parallel": row.tp,
        "pipeline_parallel": row.pp,
        "engine": engine[0],
        # served over HTTP; offline runs, and harnesses that call the engine in their own process, have no API server
        "frontend": row.load_kind in ("concurrency", "rate") and "in_process" not in row.features,
        "cuda_graphs": "eager" not in row.features,
        **({"async_scheduling": True} if "async_scheduling" in row.features else {}),
    }
    if version is not None:  # kernels the engine gained after this release run slower (kernel_releases)
        cluster["engine_version"] = row.engine_version.strip()
    if precision is not None:
        cluster["weight_precision"] = precision
    if "block_fp8" in row.features:
        cluster["weight_scaling"] = "block"
    if row.kv_precision is not None:
        cluster["kv_cache_precision"] = row.kv_precision
    scheduler: dict[str, Any] = {}
    if row.max_num_seqs is not None:
        scheduler["max_num_seqs"] = row.max_num_seqs
    if row.max_num_batched_tokens is not None:
        scheduler["max_num_batched_tokens"] = row.max_num_batched_tokens
    if row.long_prefill_tokens is not None:
        scheduler["long_prefill_token_threshold"] = row.long_prefill_tokens
    if row.multi_step is not None:  # vLLM's V0 engine: prefill steps apart, decodes in runs
        scheduler["policy"] = "vllm_v0"
        scheduler["num_scheduler_steps"] = row.multi_step
    if together > 1:
        scheduler["max_num_seqs"] = max(together, scheduler.get("max_num_seqs", 0))
    assumed: list[str] = [assumption] if assumption else []
    budget = scheduler.get("max_num_batched_tokens")
    if budget is not None and scheduler.get("max_num_seqs", 0) > budget:  # a step holds one token per sequence
        assumed.append(
            f"max_num_seqs {scheduler['max_num_seqs']} > max_num_batched_tokens {budget}: at most {budget} run"
        )
        scheduler["max_num_seqs"] = budget
    kv: dict[str, Any] = {}
    if row.engine == "trtllm" and row.load_kind == "offline" and not scheduler:
        bench = _trtllm_bench(row, catalogue.model(model), hardware, precision)
        scheduler = {"max_num_seqs": bench.max_num_seqs, "max_num_batched_tokens": bench.max_num_batched_tokens}
        # trtllm-bench throughput: --enable_chunked_context defaults to true, --scheduler_policy guaranteed_no_evict
        scheduler["policy"] = "trtllm_no_evict_chunked"
        kv["gpu_memory_frac"] = TRTLLM_BENCH_KV_FRAC
    if row.engine == "trtllm":
        _trtllm_policy(row, scheduler, _longest_prompt(lengths), assumed)
    if row.gpu_memory_frac is not None:
        kv["gpu_memory_frac"] = row.gpu_memory_frac
    cached = _documents_kv(row, lengths, kv, catalogue, engine[0]) if "documents" in lengths else None
    if cached is not None:
        assumed.append(cached)
    mapping: dict[str, Any] = {
        "name": row.row_id,
        "description": f"{row.setting()} [{row.source_url} {row.source_where}]",
        "seed": SEED,
        "workload": {"tenants": [{"name": "benchmark", "arrival": arrival, **lengths}]},
        "cluster": cluster,
        "stop": {"max_requests": simulated},
    }
    steady = steady_window(row, simulated)
    one_replica = steady and row.load_kind == "offline" and row.dp > 1
    if one_replica:  # queued requests split evenly over identical replicas: one replica, its share's waves
        mapping["cluster"]["num_replicas"] = 1
        assumed.append(f"one of the {row.dp} identical replicas simulated, its throughput counted {row.dp} times")
    if steady and row.load_kind == "rate":  # latencies of requests arriving in the run's steady state
        mapping["metrics"] = {"warmup_requests": simulated // 2, "cooldown_requests": simulated // 10}
    if row.dp > 1 and not one_replica and row.load_kind in ("concurrency", "rate"):
        if row.dispatch is not None:
            mapping["router"] = {"kind": row.dispatch}
        else:
            assumed.append(f"requests spread round robin over the {row.dp} replicas (no published rule)")
    if scheduler:
        mapping["scheduler"] = scheduler
    if kv:
        mapping["kv"] = kv
    return RowScenario(row, mapping, None, tuple(assumed), steady, row.dp if one_replica else 0)


def with_rate_factor(mapping: dict[str, Any], factor: float) -> dict[str, Any]:
    """``mapping`` (a row's scenario with Poisson arrivals) with its arrival rate times ``factor``, and as
    many more requests (its warm-up and cool-down too), so the run lasts as long at every rate."""
    tenant = mapping["workload"]["tenants"][0]
    arrival = {**tenant["arrival"], "rate_per_s": tenant["arrival"]["rate_per_s"] * factor}
    tenants = [{**tenant, "arrival": arrival}, *mapping["workload"]["tenants"][1:]]
    scaled = {**mapping, "workload": {**mapping["workload"], "tenants": tenants}}
    if "max_requests" in mapping.get("stop", {}):
        scaled["stop"] = {**mapping["stop"], "max_requests": max(1, round(mapping["stop"]["max_requests"] * factor))}
    if "metrics" in mapping:
        counts = ("warmup_requests", "cooldown_requests")
        scaled["metrics"] = {k: round(v * factor) if k in counts else v for k, v in mapping["metrics"].items()}
    return scaled
