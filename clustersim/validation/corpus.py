"""Read the public validation corpus: one CSV per publisher, one row per published measurement.

The columns are :data:`COLUMNS` (``validation/corpus/README.md`` says what each means). A file with a
column missing, repeated, unknown or out of order is refused, as is a row whose value cannot be read;
every error names the file, its line (physical, counting comments) and the column:
``nvidia.csv:12: num_gpus: 'eight' is not a whole number``. Lines whose first non-blank character
is ``#`` are comments. Row ids are unique across the corpus.

Nothing here looks at the catalogue: whether a row's GPU, model and engine can be simulated is
decided when it is (:mod:`clustersim.validation.rowscenario`), so an unknown model is a row the
validation reports as not simulated, not a file that cannot be read.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from clustersim.errors import ConfigError, did_you_mean, shown_value

LoadKind = Literal["offline", "concurrency", "rate", "batch"]
LOAD_KINDS: tuple[str, ...] = get_args(LoadKind)
SETTING_COLUMNS: tuple[str, ...] = (
    "id",
    "publisher",
    "source_url",
    "source_where",
    "source_date",
    "engine",
    "engine_version",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "ep",
    "dp",
    "model",
    "weight_precision",
    "kv_precision",
    "dataset",
    "prompt_tokens",
    "output_tokens",
    "load_kind",
    "load",
    "num_requests",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_frac",
    "features",
)
# published metrics: throughputs of the whole deployment, latencies in milliseconds
METRIC_COLUMNS: tuple[str, ...] = (
    "output_tok_per_s",
    "total_tok_per_s",
    "req_per_s",
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_mean_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
)
COLUMNS: tuple[str, ...] = (*SETTING_COLUMNS, *METRIC_COLUMNS, "notes")
THROUGHPUT_COLUMNS = ("output_tok_per_s", "total_tok_per_s", "req_per_s")
PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "int4", "int8")
KV_PRECISIONS = ("bf16", "fp16", "fp8")
REQUIRED = ("id", "publisher", "source_url", "engine", "gpu", "model", "load_kind")
# ``random-range-R``: vllm bench serve --dataset-name random --random-range-ratio R, each length uniform on
# [L(1-R), L(1+R)] (vllm/benchmarks/datasets.py, RandomDataset.sample: input_low / input_high from the ratio)
RANGE_PREFIX = "random-range-"
RANGE_DATASET = re.compile(r"random-range-(0(?:\.\d+)?|1(?:\.0+)?)$")
# ``sglang-random-IN-OUT``: sglang.bench_serving --dataset-name random --random-input-len IN
# --random-output-len OUT at its defaults (--seed 1, --random-range-ratio 0): numpy's global generator,
# seeded with 1, draws every prompt length uniform on [1, IN], then every output length uniform on
# [1, OUT]; ``-from0``: a release that draws outputs on [0, OUT] (python/sglang/bench_serving.py,
# sample_random_requests). The lengths of every request are then known, in the order sent.
SGLANG_RANDOM_PREFIX = "sglang-random-"
SGLANG_RANDOM_DATASET = re.compile(r"sglang-random-([1-9]\d*)-([1-9]\d*)(-from0)?$")
# what a row's deployment did beyond its columns (``features``, separated by ``;``)
FEATURES = {
    "dp_attention": "attention data-parallel across the GPUs (SGLang/TRT-LLM DP attention) beside TP or EP MoE",
    "disaggregated": "prefill and decode on separate instances",
    "eager": "no CUDA graphs (--enforce-eager, --disable-cuda-graph)",
    "spec_decode": "speculative decoding (draft model, EAGLE, MTP, n-gram)",
    "prefix_cache_hits": "prompts repeat, so the prefix cache serves part of them",
    "multi_node": "the deployment spans nodes",
    "max_utilization": "TensorRT-LLM's batch_scheduler_policy MAX_UTILIZATION (its default is GUARANTEED_NO_EVICT)",
    "chunked_context": "TensorRT-LLM's enable_chunked_context (off by default)",
    "block_fp8": "FP8 weights with 128 x 128 block scales (quantization_config.weight_block_size), where the "
    "model profile's published checkpoint does not already say so (Qwen/*-FP8)",
    "async_scheduling": "vLLM's --async-scheduling on a release whose default is off (before 0.14.0)",
    "in_process": "the harness calls the engine in its own process with token IDs, no API server between "
    "(MLPerf's LoadGen linked into NVIDIA's C++ harness, or AMD's, which calls vLLM's engine with prompt_token_ids)",
}
TRTLLM_FEATURES = ("max_utilization", "chunked_context")  # TensorRT-LLM's runtime options
# ``p99_bound=<TTFT ms>/<TPOT ms>``: the load is the highest rate at which the 99th percentiles of TTFT and
# TPOT stay within these bounds (MLPerf Server and Interactive, whose bounds are in loadgen/mlperf.conf)
BOUND_FEATURE = "p99_bound"
# ``long_prefill=<tokens>``: each prompt's tokens in one step were capped there (vLLM's
# ``--long-prefill-token-threshold``; the scheduler's ``long_prefill_token_threshold``)
LONG_PREFILL_FEATURE = "long_prefill"
# ``multi_step=<steps>``: vLLM's V0 engine with multi-step scheduling (``--num-scheduler-steps``; the V0
# scheduler, prefill steps apart from decodes, and the scheduler's ``num_scheduler_steps``)
MULTI_STEP_FEATURE = "multi_step"
# ``dispatch=<rule>``: how requests were spread over the row's data-parallel instances, where a source says
# (the harness's rule, or the engine's own behind one endpoint); the rules are router kinds
DISPATCH_FEATURE = "dispatch"
DISPATCH_RULES = ("round_robin", "least_outstanding", "vllm_dp")
# ``client_gap=<ms>/<us per prompt token>``: a closed loop's client worked this long on each request that ended
# before that client's next send, on one thread for every client: a fixed part and a part per prompt token of
# the request that ended (a harness that tokenizes each finished request's prompt in its concurrency slot),
# read off the source's one-client per-request files
CLIENT_GAP_FEATURE = "client_gap"
# ``earlier_runs=<IN>-<OUT>/<prompts>+...``: the runs the same server served before this one, oldest first,
# each a ``sglang.bench_serving --dataset-name random`` run of that many prompts at those nominal lengths
# (drawn as the row's own dataset is): their prompts share their leading tokens with this run's of equal
# index, and an engine that keeps its prefix cache between runs (SGLang's radix cache) still holds them
EARLIER_RUNS_FEATURE = "earlier_runs"
EARLIER_RUN = re.compile(r"([1-9]\d*)-([1-9]\d*)/([1-9]\d*)$")
# ``gpu_doubt=<GPU>``: the row's own figures contradict the GPU its source names and match this one's
# datasheet (the evidence: docs/validation.md, "GPUs in doubt"). The row is still simulated and scored on
# the GPU its source names; no fit uses it, since a scale fitted to it would move every row of that GPU.
GPU_DOUBT_FEATURE = "gpu_doubt"
GPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class CorpusRow:
    """One published measurement: its setting, its source, and the metrics published for it."""

    row_id: str
    publisher: str
    source_url: str
    source_where: str
    source_date: str
    engine: str
    engine_version: str
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    ep: int
    dp: int
    model: str
    weight_precision: str | None
    kv_precision: str | None
    dataset: str
    prompt_tokens: float | None
    output_tokens: float | None
    load_kind: LoadKind
    load: float | None
    num_requests: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    gpu_memory_frac: float | None = None
    features: frozenset[str] = frozenset()
    p99_bounds_ms: tuple[float, float] | None = None  # (TTFT, TPOT): the load was raised until these held
    long_prefill_tokens: int | None = None  # each prompt's tokens in one step capped at this
    multi_step: int | None = None  # vLLM V0 multi-step scheduling: decode steps per scheduler call
    dispatch: str | None = None  # the harness's rule over data-parallel instances (a router kind)
    client_gap: tuple[float, float] | None = None  # (s, s per prompt token) a client waited between requests
    earlier_runs: tuple[tuple[int, int, int], ...] = ()  # (IN, OUT, prompts) the server ran before, oldest first
    gpu_doubt: str | None = None  # the GPU the row's figures match instead of ``gpu`` (never fitted)
    metrics: dict[str, float] = field(default_factory=dict)
    notes: str = ""
    file: str = ""
    line: int = 0

    @property
    def comparable_metrics(self) -> dict[str, float]:
        """The metrics a simulation can be held to: all of them, but only the throughputs when prompts
        repeat (the latencies then depend on prefix-cache hits the row does not publish)."""
        if "prefix_cache_hits" in self.features:
            return {k: v for k, v in self.metrics.items() if k in THROUGHPUT_COLUMNS}
        return self.metrics

    @property
    def where(self) -> str:
        """``nvidia.csv:12``, for messages."""
        return f"{self.file}:{self.line}"

    def setting(self) -> str:
        """A short description: ``vllm 0.8.5 H100-SXM x1 Llama-3.1-8B bf16 TP1, 1000 in / 1000 out, concurrency 64``."""
        lengths = f"{_num(self.prompt_tokens)} in / {_num(self.output_tokens)} out"
        if self.dataset and self.dataset != "random":
            lengths = f"{self.dataset} ({lengths})"
        load = self.load_kind if self.load is None else f"{self.load_kind} {_num(self.load)}"
        parallel = f"TP{self.tp}" + (f" PP{self.pp}" if self.pp > 1 else "") + (f" EP{self.ep}" if self.ep > 1 else "")
        parallel += f" x{self.dp}" if self.dp > 1 else ""
        version = f" {self.engine_version}" if self.engine_version else ""
        precision = self.weight_precision or "?"
        return f"{self.engine}{version} {self.gpu} {self.model} {precision} {parallel}, {lengths}, {load}"


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:g}"


def _comment_free(lines: Iterator[str], numbers: list[int]) -> Iterator[str]:
    for number, line in enumerate(lines, start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            numbers.append(number)
            yield line


def _check_header(header: Sequence[str], where: str) -> None:
    if list(header) == list(COLUMNS):
        return
    for name in header:
        if name not in COLUMNS:
            raise ConfigError(where, name, f"unknown column{did_you_mean(name, COLUMNS)}")
        if list(header).count(name) > 1:
            raise ConfigError(where, name, "column given twice")
    missing = [name for name in COLUMNS if name not in header]
    if missing:
        raise ConfigError(where, missing[0], "column missing")
    raise ConfigError(where, "header", f"columns out of order; expected: {','.join(COLUMNS)}")


def _integer(text: str, column: str, where: str, minimum: int = 1) -> int | None:
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        raise ConfigError(where, column, f"{shown_value(text)} is not a whole number") from None
    if not number.is_integer() or number < minimum:
        raise ConfigError(where, column, f"{shown_value(text)} must be a whole number >= {minimum}")
    return int(number)


def _real(text: str, column: str, where: str, allow_inf: bool = False) -> float | None:
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        raise ConfigError(where, column, f"{shown_value(text)} is not a number") from None
    if math.isnan(number) or number <= 0 or (math.isinf(number) and not allow_inf):
        raise ConfigError(where, column, f"{shown_value(text)} must be a positive number")
    return number


def _choice(text: str, column: str, where: str, choices: Sequence[str]) -> str | None:
    if not text:
        return None
    if text not in choices:
        raise ConfigError(where, column, f"{shown_value(text)} is not one of {', '.join(choices)}")
    return text


def _fraction(text: str, where: str) -> float | None:
    value = _real(text, "gpu_memory_frac", where)
    if value is not None and value > 1:
        raise ConfigError(where, "gpu_memory_frac", f"{shown_value(text)} must be a fraction in (0, 1]")
    return value


def _dataset(text: str, where: str) -> str:
    name = text.lower()
    if name.startswith(RANGE_PREFIX) and not RANGE_DATASET.match(name):
        raise ConfigError(where, "dataset", f"{shown_value(text)}: write {RANGE_PREFIX}R with R in [0, 1]")
    if name.startswith(SGLANG_RANDOM_PREFIX) and not SGLANG_RANDOM_DATASET.match(name):
        raise ConfigError(
            where, "dataset", f"{shown_value(text)}: write {SGLANG_RANDOM_PREFIX}IN-OUT or ...-IN-OUT-from0"
        )
    return name


@dataclass(frozen=True)
class _Stated:
    """What a row's ``features`` column states."""

    features: frozenset[str]
    bounds: tuple[float, float] | None
    long_prefill: int | None
    dispatch: str | None
    client_gap: tuple[float, float] | None = None
    earlier_runs: tuple[tuple[int, int, int], ...] = ()
    multi_step: int | None = None
    gpu_doubt: str | None = None


def _features(text: str, where: str) -> _Stated:
    """The row's features, its p99 bounds (``p99_bound=<TTFT ms>/<TPOT ms>``), its per-prompt step cap
    (``long_prefill=<tokens>``), its harness's dispatch rule (``dispatch=<rule>``) and its client's wait
    between requests (``client_gap=<ms>/<us per prompt token>``), where it states them."""
    found, bounds, long_prefill, dispatch, gap, multi_step = set(), None, None, None, None, None
    earlier: tuple[tuple[int, int, int], ...] = ()
    doubt = None
    for name in sorted(f.strip() for f in text.split(";") if f.strip()):
        if name.startswith(GPU_DOUBT_FEATURE + "="):
            doubt = name.split("=", 1)[1]
            if not GPU_NAME.match(doubt):
                problem = f"{shown_value(name)}: write {GPU_DOUBT_FEATURE}=<GPU> (a hardware profile's name)"
                raise ConfigError(where, "features", problem)
        elif name.startswith(EARLIER_RUNS_FEATURE + "="):
            earlier = _earlier_runs(name, where)
        elif name.startswith(BOUND_FEATURE + "="):
            bounds = _bounds(name, where)
        elif name.startswith(CLIENT_GAP_FEATURE + "="):
            gap = _client_gap(name, where)
        elif name.startswith(LONG_PREFILL_FEATURE + "="):
            long_prefill = _whole(name, where, LONG_PREFILL_FEATURE, "tokens")
        elif name.startswith(MULTI_STEP_FEATURE + "="):
            multi_step = _whole(name, where, MULTI_STEP_FEATURE, "steps")
        elif name.startswith(DISPATCH_FEATURE + "="):
            dispatch = name.split("=", 1)[1]
            if dispatch not in DISPATCH_RULES:
                problem = f"{shown_value(name)}: write {DISPATCH_FEATURE}=<rule>, one of {', '.join(DISPATCH_RULES)}"
                raise ConfigError(where, "features", problem)
        elif name in FEATURES:
            found.add(name)
        else:
            valued = [f"{BOUND_FEATURE}=<TTFT ms>/<TPOT ms>", f"{LONG_PREFILL_FEATURE}=<tokens>",
                      f"{MULTI_STEP_FEATURE}=<steps>",
                      f"{CLIENT_GAP_FEATURE}=<ms>/<us per prompt token>",
                      f"{EARLIER_RUNS_FEATURE}=<IN>-<OUT>/<prompts>+...", f"{GPU_DOUBT_FEATURE}=<GPU>"]  # fmt: skip
            known = ", ".join([*FEATURES, *valued, f"{DISPATCH_FEATURE}=<rule>"])
            problem = f"unknown feature '{name}'{did_you_mean(name, FEATURES)}; known: {known}"
            raise ConfigError(where, "features", problem)
    return _Stated(frozenset(found), bounds, long_prefill, dispatch, gap, earlier, multi_step, doubt)


def _earlier_runs(text: str, where: str) -> tuple[tuple[int, int, int], ...]:
    """(IN, OUT, prompts) of each run in ``earlier_runs=<IN>-<OUT>/<prompts>+...``, oldest first."""
    runs = []
    for part in text.split("=", 1)[1].split("+"):
        match = EARLIER_RUN.match(part.strip())
        if match is None:
            problem = f"{shown_value(text)}: write {EARLIER_RUNS_FEATURE}=<IN>-<OUT>/<prompts>+... (whole numbers > 0)"
            raise ConfigError(where, "features", problem)
        runs.append((int(match.group(1)), int(match.group(2)), int(match.group(3))))
    return tuple(runs)


def _client_gap(text: str, where: str) -> tuple[float, float]:
    """(seconds, seconds per prompt token) from ``client_gap=<ms>/<us per prompt token>``."""
    fixed_ms, per_token_us = _pair(text, where, "<ms>/<us per prompt token>, both >= 0", 0.0)
    return fixed_ms / 1e3, per_token_us / 1e6


def _whole(text: str, where: str, feature: str, unit: str) -> int:
    """The whole number > 0 of ``<feature>=<number>``."""
    number = text.split("=", 1)[1]
    if not (number.isdigit() and int(number) > 0):
        problem = f"{shown_value(text)}: write {feature}=<{unit}>, a whole number > 0"
        raise ConfigError(where, "features", problem)
    return int(number)


def _bounds(text: str, where: str) -> tuple[float, float]:
    return _pair(text, where, "<TTFT ms>/<TPOT ms>, both > 0", math.ulp(0.0))


def _pair(text: str, where: str, form: str, least: float) -> tuple[float, float]:
    """The two finite numbers of a ``name=<a>/<b>`` feature, each at least ``least``, else the form to write."""
    name, value = text.split("=", 1)
    try:
        first, second = (float(p) for p in value.split("/"))
    except ValueError:
        first = second = math.nan
    if not all(math.isfinite(v) and v >= least for v in (first, second)):
        raise ConfigError(where, "features", f"{shown_value(text)}: write {name}={form}")
    return first, second


def parse_row(raw: dict[str, str], file: str, line: int) -> CorpusRow:
    """One row of a corpus file (``raw``: column -> text, stripped)."""
    where = f"{file}:{line}"
    for column in REQUIRED:
        if not raw[column]:
            raise ConfigError(where, column, "must not be empty")
    if not raw["id"].startswith(raw["publisher"] + "-"):
        raise ConfigError(where, "id", f"{shown_value(raw['id'])} must start with the publisher, '{raw['publisher']}-'")
    load_kind = _choice(raw["load_kind"], "load_kind", where, LOAD_KINDS)
    load = _real(raw["load"], "load", where, allow_inf=True)
    if load_kind != "offline" and load is None:
        raise ConfigError(where, "load", f"must be given for load_kind {load_kind}")
    metrics = {name: value for name in METRIC_COLUMNS if (value := _real(raw[name], name, where)) is not None}
    if not metrics:
        raise ConfigError(where, "output_tok_per_s", "the row publishes no metric")
    tp = _integer(raw["tp"], "tp", where) or 1
    pp = _integer(raw["pp"], "pp", where) or 1
    dp = _integer(raw["dp"], "dp", where) or 1
    num_gpus = _integer(raw["num_gpus"], "num_gpus", where) or tp * pp * dp
    stated = _features(raw["features"], where)
    features, bounds = stated.features, stated.bounds
    if bounds is not None and (load_kind != "rate" or load is None or not math.isfinite(load)):
        problem = f"{BOUND_FEATURE} needs a rate row with a finite rate (the rate it searches from)"
        raise ConfigError(where, "features", problem)
    if stated.client_gap is not None and load_kind != "concurrency":
        problem = f"{CLIENT_GAP_FEATURE} is a closed loop's wait between requests; the row's load_kind is {load_kind}"
        raise ConfigError(where, "features", problem)
    engine_only = [f for f in TRTLLM_FEATURES if f in features]
    if engine_only and raw["engine"].lower() != "trtllm":
        problem = f"{engine_only[0]} is a TensorRT-LLM option; the engine is {raw['engine']}"
        raise ConfigError(where, "features", problem)
    if stated.multi_step is not None and raw["engine"].lower() != "vllm":
        problem = f"{MULTI_STEP_FEATURE} is vLLM V0's multi-step scheduling; the engine is {raw['engine']}"
        raise ConfigError(where, "features", problem)
    if stated.earlier_runs and not SGLANG_RANDOM_DATASET.match(raw["dataset"]):
        problem = f"{EARLIER_RUNS_FEATURE} are runs of the same seeded client: the dataset must be sglang-random-IN-OUT"
        raise ConfigError(where, "features", problem)
    if stated.gpu_doubt is not None and stated.gpu_doubt.lower() == raw["gpu"].lower():
        problem = f"{GPU_DOUBT_FEATURE}={stated.gpu_doubt} names the row's own GPU: name the one its figures match"
        raise ConfigError(where, "features", problem)
    return CorpusRow(
        row_id=raw["id"],
        publisher=raw["publisher"],
        source_url=raw["source_url"],
        source_where=raw["source_where"],
        source_date=raw["source_date"],
        engine=raw["engine"].lower(),
        engine_version=raw["engine_version"],
        gpu=raw["gpu"],
        num_gpus=num_gpus,
        tp=tp,
        pp=pp,
        ep=_integer(raw["ep"], "ep", where) or 1,
        dp=dp,
        model=raw["model"],
        weight_precision=_choice(raw["weight_precision"].lower(), "weight_precision", where, PRECISIONS),
        kv_precision=_choice(raw["kv_precision"].lower(), "kv_precision", where, KV_PRECISIONS),
        dataset=_dataset(raw["dataset"], where),
        prompt_tokens=_real(raw["prompt_tokens"], "prompt_tokens", where),
        output_tokens=_real(raw["output_tokens"], "output_tokens", where),
        load_kind=load_kind,  # type: ignore[arg-type]
        load=load,
        num_requests=_integer(raw["num_requests"], "num_requests", where),
        max_num_seqs=_integer(raw["max_num_seqs"], "max_num_seqs", where),
        max_num_batched_tokens=_integer(raw["max_num_batched_tokens"], "max_num_batched_tokens", where),
        gpu_memory_frac=_fraction(raw["gpu_memory_frac"], where),
        features=features,
        p99_bounds_ms=bounds,
        long_prefill_tokens=stated.long_prefill,
        multi_step=stated.multi_step,
        dispatch=stated.dispatch,
        client_gap=stated.client_gap,
        earlier_runs=stated.earlier_runs,
        gpu_doubt=stated.gpu_doubt,
        metrics=metrics,
        notes=raw["notes"],
        file=file,
        line=line,
    )


def load_corpus_file(path: Path) -> tuple[CorpusRow, ...]:
    """The rows of one corpus file."""
    name = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "", f"cannot read the file ({exc})") from None
    numbers: list[int] = []
    reader = csv.reader(_comment_free(iter(text.splitlines()), numbers))
    header = next(reader, None)
    if header is None:
        raise ConfigError(str(path), "", "no header line")
    _check_header([h.strip() for h in header], f"{name}:{numbers[0]}")
    rows = []
    for index, values in enumerate(reader, start=1):
        line = numbers[index]
        if len(values) != len(COLUMNS):
            raise ConfigError(f"{name}:{line}", "", f"{len(values)} fields where the header has {len(COLUMNS)}")
        rows.append(parse_row(dict(zip(COLUMNS, (v.strip() for v in values), strict=True)), name, line))
    return tuple(rows)


def load_corpus(folder: Path) -> tuple[CorpusRow, ...]:
    """Every row of every ``*.csv`` in ``folder`` (files in name order), ids unique."""
    if not folder.is_dir():
        raise ConfigError(str(folder), "", "corpus folder not found")
    files = sorted(folder.glob("*.csv"))
    if not files:
        raise ConfigError(str(folder), "", "no *.csv file in the corpus folder")
    rows: list[CorpusRow] = []
    seen: dict[str, str] = {}
    for path in files:
        for row in load_corpus_file(path):
            if row.row_id in seen:
                raise ConfigError(row.where, "id", f"'{row.row_id}' is also the id of {seen[row.row_id]}")
            seen[row.row_id] = row.where
            rows.append(row)
    return tuple(rows)


def corpus_sha256(folder: Path) -> str:
    """A hash of the corpus files' names and contents (what a validation ran on)."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.csv")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
