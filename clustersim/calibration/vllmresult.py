"""Read the JSON that ``vllm bench serve --save-result`` writes (also the older
``benchmarks/benchmark_serving.py --save-result``): one benchmark per JSON object.

Keys read: ``request_rate`` (a number, or ``"inf"``: all requests at once), ``burstiness`` (the
gamma shape of the inter-arrival times: their coefficient of variation is ``1 / sqrt(burstiness)``),
``max_concurrency`` (null, or the client's limit on requests in flight), ``ramp_up_strategy``,
``model_id``, ``completed``, ``total_input_tokens``, ``total_output_tokens``, ``mean_ttft_ms``,
``p99_ttft_ms``, ``mean_itl_ms`` (over every gap between two tokens, as the CSV's ``itl_s``),
``p99_itl_ms`` and ``output_throughput`` (output tokens over the benchmark's duration). With
``--save-detailed`` (always, in older versions) also the per-request lists ``input_lens``,
``output_lens`` and ``errors`` (empty text for a request that succeeded), and in recent versions
``start_times`` (when each request was sent). Requests that failed or produced no token are not
replayed.

The load kind: ``max_concurrency`` with an infinite rate is ``concurrency`` (a closed loop of that
many users); a finite rate without it ``rate_per_s``; an infinite rate without it ``batch`` (every
request at once). A finite rate with ``max_concurrency``, or a ramp-up, is neither: such a file is
replayed at the send times of its ``start_times`` and refused without them.
"""

from __future__ import annotations

import math
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
from clustersim.calibration.jsonfields import JsonObject, is_number
from clustersim.calibration.measurements import LoadKind, ReplayedRequest
from clustersim.errors import shown_value

SUMMARY_KEYS = ("mean_ttft_ms", "mean_itl_ms", "output_throughput")


def is_vllm_result(value: Mapping[str, Any]) -> bool:
    """Whether a JSON object looks like a ``--save-result`` file's."""
    has_traffic = "completed" in value or "request_rate" in value
    return has_traffic and any(key in value for key in SUMMARY_KEYS)


def _request_rate(doc: JsonObject) -> float:
    value = doc.value.get("request_rate")
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if value is None or not is_number(value) or math.isnan(value) or value <= 0:
        raise doc.error("request_rate", f"expected a positive number or 'inf', got {shown_value(value)}")
    return float(value)


def _requests(doc: JsonObject) -> tuple[ReplayedRequest, ...] | None:
    """The successful requests of the per-request lists, or None without them."""
    if not doc.has("input_lens"):
        return None
    inputs = doc.numbers("input_lens")
    outputs = doc.numbers("output_lens", len(inputs))
    errors = doc.items("errors") if doc.has("errors") else [""] * len(inputs)
    if len(errors) != len(inputs):
        raise doc.error("errors", f"has {len(errors)} entries where the other per-request lists have {len(inputs)}")
    starts = doc.numbers("start_times", len(inputs)) if doc.has("start_times") else None
    kept = [
        i
        for i in range(len(inputs))
        if not errors[i] and token_length(inputs[i], doc, "input_lens") and token_length(outputs[i], doc, "output_lens")
    ]
    if not kept:
        raise doc.error("errors", "no request succeeded with at least one token: nothing to replay")
    return replayed(
        [int(inputs[i]) for i in kept],
        [int(outputs[i]) for i in kept],
        [starts[i] for i in kept] if starts is not None else None,
    )


def _timed_load(doc: JsonObject, requests: tuple[ReplayedRequest, ...] | None, why: str) -> tuple[LoadKind, float]:
    """A benchmark replayed at its send times: the load is its mean arrival rate."""
    if requests is None or requests[0][0] is None:
        raise doc.error(
            why,
            "a request rate with a concurrency limit, or a ramp-up, is replayed at the requests' send times: "
            "the file needs start_times (written by a recent vllm bench serve with --save-detailed)",
        )
    span_s = max(r[0] or 0.0 for r in requests)
    return ("rate_per_s", len(requests) / span_s) if span_s > 0 else ("batch", float(len(requests)))


def _load(doc: JsonObject, count: int, requests: tuple[ReplayedRequest, ...] | None) -> tuple[LoadKind, float, float]:
    """Load kind, load and the inter-arrival times' coefficient of variation."""
    rate = _request_rate(doc)
    max_concurrency = doc.count("max_concurrency") if doc.has("max_concurrency") else None
    if max_concurrency == 0:
        raise doc.error("max_concurrency", "0 must be at least 1")
    if doc.has("ramp_up_strategy"):
        return (*_timed_load(doc, requests, "ramp_up_strategy"), 1.0)
    if max_concurrency is not None and math.isfinite(rate):
        return (*_timed_load(doc, requests, "max_concurrency"), 1.0)
    if max_concurrency is not None:
        return "concurrency", float(max_concurrency), 1.0
    if math.isinf(rate):
        return "batch", float(count), 1.0
    burstiness = doc.optional_number("burstiness") or 1.0
    if burstiness <= 0:
        raise doc.error("burstiness", f"{shown_value(burstiness)} must be positive")
    return "rate_per_s", rate, 1.0 / math.sqrt(burstiness)


def vllm_run(doc: JsonObject, index: int) -> BenchmarkRun:
    """The benchmark of one ``--save-result`` object (``index``: its 1-based position in the file)."""
    completed = doc.count("completed")
    if completed == 0:
        raise doc.error("completed", "0: no request completed, so nothing was measured")
    requests = _requests(doc)
    count = len(requests) if requests is not None else completed
    kind, load, cv = _load(doc, count, requests)
    if requests is not None:
        prompt_tokens, output_tokens = mean_lengths(requests)
    else:
        prompt_tokens = mean_tokens(doc.number("total_input_tokens"), completed)
        output_tokens = mean_tokens(doc.number("total_output_tokens"), completed)
    sources: list[MeasuredSource] = [
        ("ttft_s", doc, "mean_ttft_ms", MS),
        ("itl_s", doc, "mean_itl_ms", MS),
        ("output_tokens_per_s", doc, "output_throughput", 1.0),
        ("ttft_p99_s", doc, "p99_ttft_ms", MS),
        ("itl_p99_s", doc, "p99_itl_ms", MS),
    ]
    return BenchmarkRun(
        index=index,
        model_id=doc.optional_text("model_id"),
        load_kind=kind,
        load=load,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        measured=measured_values(sources, doc),
        requests=requests,
        num_requests=count,
        interarrival_cv=cv,
    )
