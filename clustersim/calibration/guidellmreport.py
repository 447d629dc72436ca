"""Read a GuideLLM benchmark report (``guidellm benchmark --output-path report.json``): one row per benchmark.

Both layouts are read: GuideLLM 0.2-0.3 (a benchmark's strategy under ``args.strategy``, its
request counts in ``request_totals``, a request's send time in ``start_time``) and 0.4 and later
(``config.strategy``, ``metrics.request_totals``, ``request_start_time``). The strategy's ``type_``
gives the load kind: ``synchronous`` is concurrency 1, ``concurrent`` concurrency ``streams``,
``throughput`` concurrency ``max_concurrency`` (without one: a batch of every request),
``constant`` and ``poisson`` rate_per_s ``rate`` (inter-arrival CV 0 and 1); ``trace`` is replayed
at the requests' send times. A sweep is a report whose benchmarks have different strategies.

Each successful request (``requests.successful``) gives ``prompt_tokens``, ``output_tokens``, its
send time, ``time_to_first_token_ms`` and ``inter_token_latency_ms``. When the report holds every
successful request (GuideLLM did not sample them), they are replayed and the measured ITL is their
mean over every gap between two tokens (each request's ITL weighted by its number of gaps), as the
CSV's ``itl_s``. TTFT (mean, p99), the ITL's p99 and the output throughput are the report's
``metrics`` (``time_to_first_token_ms.successful.mean``, ``...percentiles.p99``,
``output_tokens_per_second.successful.mean``), as are the mean lengths of a sampled benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clustersim.calibration.benchruns import (
    MS,
    BenchmarkRun,
    MeasuredSource,
    mean_lengths,
    mean_tokens,
    measured_values,
    replayed,
    token_length,
)
from clustersim.calibration.jsonfields import JsonObject
from clustersim.calibration.measurements import LoadKind, ReplayedRequest
from clustersim.errors import did_you_mean, shown_value

STRATEGIES = ("synchronous", "concurrent", "throughput", "constant", "poisson", "trace")
MODEL_PATHS = (("config", "backend", "model"), ("worker", "backend_model"))  # per benchmark: new, old


def is_guidellm_report(value: Mapping[str, Any]) -> bool:
    """Whether a JSON object looks like a GuideLLM report: a list of ``benchmarks``."""
    return isinstance(value.get("benchmarks"), list)


def _strategy(bench: JsonObject) -> JsonObject:
    holder = bench.optional_child("config") or bench.optional_child("args")
    if holder is None or not holder.has("strategy"):
        raise bench.error("config.strategy", "missing: expected the benchmark's scheduling strategy")
    return holder.child("strategy")


def _load(
    strategy: JsonObject, requests: tuple[ReplayedRequest, ...] | None, count: int
) -> tuple[LoadKind, float, float]:
    """Load kind, load and the inter-arrival CV of a strategy."""
    kind = strategy.text("type_")
    if kind == "synchronous":
        return "concurrency", 1.0, 1.0
    if kind == "concurrent":
        return "concurrency", float(max(1, strategy.count("streams"))), 1.0
    if kind == "throughput":
        if strategy.has("max_concurrency"):
            return "concurrency", float(max(1, strategy.count("max_concurrency"))), 1.0
        return "batch", float(count), 1.0
    if kind in ("constant", "poisson"):
        rate = strategy.number("rate")
        if rate <= 0:
            raise strategy.error("rate", f"{shown_value(rate)} must be positive")
        return "rate_per_s", rate, 0.0 if kind == "constant" else 1.0
    if kind == "trace":
        if requests is None or requests[0][0] is None:
            raise strategy.error("type_", "a trace benchmark is replayed at its requests' send times: none listed")
        span_s = max(r[0] or 0.0 for r in requests)
        return ("rate_per_s", len(requests) / span_s, 1.0) if span_s > 0 else ("batch", float(len(requests)), 1.0)
    raise strategy.error("type_", f"unknown strategy {shown_value(kind)}{did_you_mean(kind, STRATEGIES)}")


def _successful_total(bench: JsonObject) -> int:
    totals = bench.optional_child("request_totals") or bench.child("metrics").optional_child("request_totals")
    if totals is None:
        raise bench.error("metrics.request_totals", "missing: expected the benchmark's request counts")
    return totals.count("successful")


def _requests(bench: JsonObject, total: int) -> tuple[list[JsonObject], tuple[ReplayedRequest, ...]] | None:
    """Every successful request and the replayable ones, or None when the report holds a sample or none."""
    holder = bench.optional_child("requests")
    records = holder.objects("successful") if holder is not None and holder.has("successful") else []
    if not records or len(records) != total:
        return None
    prompts = [token_length(r.number("prompt_tokens"), r, "prompt_tokens") for r in records]
    outputs = [token_length(r.number("output_tokens"), r, "output_tokens") for r in records]
    starts = [r.optional_number("request_start_time") or r.optional_number("start_time") for r in records]
    kept = [i for i in range(len(records)) if prompts[i] and outputs[i]]
    if not kept:
        return None
    timed = all(starts[i] is not None for i in kept)
    times = [float(starts[i] or 0.0) for i in kept] if timed else None
    return records, replayed([prompts[i] for i in kept], [outputs[i] for i in kept], times)


def _gap_weighted_itl_ms(records: list[JsonObject]) -> float | None:
    """The mean ITL over every gap between two tokens of the requests (None: no gap)."""
    total_ms, gaps = 0.0, 0
    for record in records:
        itl_ms, output = record.optional_number("inter_token_latency_ms"), record.number("output_tokens")
        if itl_ms is not None and output >= 2:
            total_ms += itl_ms * (output - 1)
            gaps += int(output) - 1
    return total_ms / gaps if gaps else None


def _summary(metrics: JsonObject, name: str) -> JsonObject | None:
    block = metrics.optional_child(name)
    return block.optional_child("successful") if block is not None else None


def _measured_sources(metrics: JsonObject, records: list[JsonObject] | None) -> list[MeasuredSource]:
    itl_ms = _gap_weighted_itl_ms(records) if records else None
    derived = JsonObject({"itl_ms": itl_ms} if itl_ms is not None else {}, metrics.source, metrics.path)
    ttft, itl = _summary(metrics, "time_to_first_token_ms"), _summary(metrics, "inter_token_latency_ms")
    return [
        ("ttft_s", ttft, "mean", MS),
        ("itl_s", derived, "itl_ms", MS),
        ("itl_s", itl, "mean", MS),  # a sampled benchmark: the report's own mean
        ("output_tokens_per_s", _summary(metrics, "output_tokens_per_second"), "mean", 1.0),
        ("ttft_p99_s", ttft.optional_child("percentiles") if ttft else None, "p99", MS),
        ("itl_p99_s", itl.optional_child("percentiles") if itl else None, "p99", MS),
    ]


def _model_id(bench: JsonObject, report: JsonObject) -> str | None:
    for holder, keys in [(bench, path) for path in MODEL_PATHS] + [(report, ("config", "backend", "model"))]:
        value = holder.lookup(*keys)
        if isinstance(value, str) and value and value != "None":
            return value
    return None


def guidellm_run(bench: JsonObject, report: JsonObject, index: int) -> BenchmarkRun:
    """The benchmark ``bench`` of a report (``index``: its 1-based position in ``benchmarks``)."""
    total = _successful_total(bench)
    if total == 0:
        raise bench.error("requests", "no request succeeded, so nothing was measured")
    listed = _requests(bench, total)
    records, requests = listed if listed is not None else (None, None)
    kind, load, cv = _load(_strategy(bench), requests, len(requests) if requests else total)
    metrics = bench.child("metrics")
    if requests is not None:
        prompt_tokens, output_tokens = mean_lengths(requests)
    else:
        prompt_tokens = mean_tokens(_mean_of(metrics, "prompt_token_count"), 1)
        output_tokens = mean_tokens(_mean_of(metrics, "output_token_count"), 1)
    return BenchmarkRun(
        index=index,
        model_id=_model_id(bench, report),
        load_kind=kind,
        load=load,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        measured=measured_values(_measured_sources(metrics, records), bench),
        requests=requests,
        num_requests=len(requests) if requests is not None else total,
        interarrival_cv=cv,
    )


def _mean_of(metrics: JsonObject, name: str) -> float:
    return metrics.child(name).child("successful").number("mean")
