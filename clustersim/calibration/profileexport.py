"""Read a GenAI-Perf or AIPerf profile export (``profile_export_genai_perf.json``,
``profile_export_aiperf.json``): one benchmark, summary figures only.

Metric blocks (``{"unit": ..., "avg": ..., "p99": ...}``): ``time_to_first_token`` and
``inter_token_latency`` in ms (the ITL is each request's mean gap, averaged over requests: the
CSV's ``itl_s`` when every request has the same length), ``output_token_throughput`` in tokens/s,
``input_sequence_length`` and ``output_sequence_length`` (the mean lengths) and ``request_count``.

``input_config`` gives the model (``model_names``; AIPerf ``endpoint.model_names``; older GenAI-Perf
``model``) and the load: GenAI-Perf's ``perf_analyzer.stimulus`` (``{"concurrency": N}`` or
``{"request_rate": R}``; older versions ``concurrency`` and ``request_rate`` at the top), AIPerf's
``loadgen`` (``concurrency``, ``request_rate``, ``request_rate_mode``). A GenAI-Perf rate has
constant intervals (perf_analyzer's default ``--request-distribution``), an AIPerf rate is Poisson
unless ``request_rate_mode`` is ``constant``. Without measured lengths the configured means are used
(``input.synthetic_tokens.mean`` and ``input.output_tokens.mean``; older ``synthetic_input_tokens_mean``
and ``output_tokens_mean``; AIPerf ``input.prompt.input_tokens.mean`` and ``...output_tokens.mean``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clustersim.calibration.benchruns import MS, BenchmarkRun, MeasuredSource, mean_tokens, measured_values
from clustersim.calibration.jsonfields import JsonObject, is_number
from clustersim.calibration.measurements import LoadKind
from clustersim.errors import shown_value

METRIC_BLOCKS = ("time_to_first_token", "inter_token_latency", "output_token_throughput", "request_throughput")
PROMPT_PATHS = (
    ("input", "synthetic_tokens", "mean"),
    ("synthetic_input_tokens_mean",),
    ("input", "prompt", "input_tokens", "mean"),
)
OUTPUT_PATHS = (
    ("input", "output_tokens", "mean"),
    ("output_tokens_mean",),
    ("input", "prompt", "output_tokens", "mean"),
)


def is_profile_export(value: Mapping[str, Any]) -> bool:
    """Whether a JSON object looks like a GenAI-Perf or AIPerf profile export."""
    return isinstance(value.get("input_config"), dict) and any(isinstance(value.get(k), dict) for k in METRIC_BLOCKS)


def _positive(holder: JsonObject, key: str) -> float | None:
    value = holder.optional_number(key)
    if value is not None and value <= 0:
        raise holder.error(key, f"{shown_value(value)} must be positive")
    return value


def _aiperf_load(loadgen: JsonObject) -> tuple[LoadKind, float, float]:
    rate, concurrency = _positive(loadgen, "request_rate"), _positive(loadgen, "concurrency")
    mode = loadgen.optional_text("request_rate_mode")
    if rate is not None and concurrency is not None and mode != "concurrency_burst":
        raise loadgen.error("concurrency", "a request rate with a concurrency limit is neither load kind: give one")
    if rate is not None:
        return "rate_per_s", rate, 0.0 if mode == "constant" else 1.0
    return "concurrency", float(loadgen.count("concurrency")) if concurrency else 1.0, 1.0


def _load(config: JsonObject) -> tuple[LoadKind, float, float]:
    """Load kind, load and the inter-arrival CV that ``input_config`` describes."""
    loadgen = config.optional_child("loadgen")
    if loadgen is not None:
        return _aiperf_load(loadgen)
    analyzer = config.optional_child("perf_analyzer")
    stimulus = analyzer.optional_child("stimulus") if analyzer is not None else None
    holder = stimulus or config
    rate = _positive(holder, "request_rate")
    if rate is not None:
        return "rate_per_s", rate, 0.0
    if _positive(holder, "concurrency") is not None:
        return "concurrency", float(holder.count("concurrency")), 1.0
    raise config.error("perf_analyzer.stimulus", "missing: expected a concurrency or a request_rate")


def _length(doc: JsonObject, config: JsonObject, block: str, paths: tuple[tuple[str, ...], ...]) -> int:
    measured = doc.optional_child(block)
    if measured is not None and measured.has("avg"):
        return mean_tokens(measured.number("avg"), 1)
    for path in paths:
        value = config.lookup(*path)
        if is_number(value) and value > 0:
            return mean_tokens(float(value), 1)
    raise doc.error(block, "missing: expected the mean length (or a configured mean in input_config)")


def _model_id(config: JsonObject) -> str | None:
    for value in (config.lookup("model_names"), config.lookup("endpoint", "model_names"), config.lookup("model")):
        first = value[0] if isinstance(value, list) and value else value
        if isinstance(first, str) and first:
            return first
    return None


def profile_export_run(doc: JsonObject) -> BenchmarkRun:
    """The one benchmark of a GenAI-Perf or AIPerf profile export."""
    config = doc.child("input_config")
    kind, load, cv = _load(config)
    blocks = {name: doc.optional_child(name) for name in ("time_to_first_token", "inter_token_latency")}
    sources: list[MeasuredSource] = [
        ("ttft_s", blocks["time_to_first_token"], "avg", MS),
        ("itl_s", blocks["inter_token_latency"], "avg", MS),
        ("output_tokens_per_s", doc.optional_child("output_token_throughput"), "avg", 1.0),
        ("ttft_p99_s", blocks["time_to_first_token"], "p99", MS),
        ("itl_p99_s", blocks["inter_token_latency"], "p99", MS),
    ]
    count = doc.optional_child("request_count")
    num_requests = round(count.number("avg")) if count is not None and count.has("avg") else None
    return BenchmarkRun(
        index=1,
        model_id=_model_id(config),
        load_kind=kind,
        load=load,
        prompt_tokens=_length(doc, config, "input_sequence_length", PROMPT_PATHS),
        output_tokens=_length(doc, config, "output_sequence_length", OUTPUT_PATHS),
        measured=measured_values(sources, doc),
        num_requests=num_requests or None,
        interarrival_cv=cv,
    )
