"""GuideLLM reports: each strategy's load kind, the older (0.2-0.3) layout, and one-line refusals of a
malformed report naming the benchmark and key."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from clustersim.calibration.datafiles import FileOptions, read_data
from clustersim.calibration.guidellmreport import guidellm_run
from clustersim.calibration.jsonfields import JsonObject
from clustersim.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data" / "calibrate"
REPORT: dict[str, Any] = json.loads((DATA / "guidellm-report.json").read_text(encoding="utf-8"))


def first_benchmark(strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    bench = copy.deepcopy(REPORT["benchmarks"][0])
    if strategy is not None:
        bench["config"]["strategy"] = strategy
    return bench


def run_of(bench: dict[str, Any]) -> Any:
    root = JsonObject({"benchmarks": [bench]}, "g.json")
    return guidellm_run(root.objects("benchmarks")[0], root, 1)


@pytest.mark.parametrize(
    ("strategy", "kind", "load", "cv"),
    [
        ({"type_": "synchronous"}, "concurrency", 1.0, 1.0),
        ({"type_": "concurrent", "streams": 16}, "concurrency", 16.0, 1.0),
        ({"type_": "throughput", "max_concurrency": 64}, "concurrency", 64.0, 1.0),
        ({"type_": "throughput", "max_concurrency": None}, "batch", 3.0, 1.0),  # every request at once
        ({"type_": "poisson", "rate": 2.5}, "rate_per_s", 2.5, 1.0),
        ({"type_": "constant", "rate": 2.5}, "rate_per_s", 2.5, 0.0),
        ({"type_": "trace", "time_scale": 1.0}, "rate_per_s", 3 / 0.6, 1.0),  # its send times, replayed
    ],
)
def test_load_kind_of_each_strategy(strategy: dict[str, Any], kind: str, load: float, cv: float) -> None:
    run = run_of(first_benchmark(strategy))
    assert (run.load_kind, run.interarrival_cv) == (kind, cv) and run.load == pytest.approx(load)
    assert run.requests is not None and len(run.requests) == 3


def test_the_older_layout() -> None:
    """GuideLLM 0.2-0.3: args.strategy, request_totals at the top, start_time, worker.backend_model."""
    bench = first_benchmark()
    bench["args"] = {"strategy": {"type_": "concurrent", "streams": 2}}
    bench["worker"] = {"backend_model": "meta-llama/Meta-Llama-3.1-8B-Instruct"}
    bench["request_totals"] = bench["metrics"].pop("request_totals")
    del bench["config"]
    for record in bench["requests"]["successful"]:
        record["start_time"] = record.pop("request_start_time")
    run = run_of(bench)
    assert (run.load_kind, run.load, run.model_id) == ("concurrency", 2.0, "meta-llama/Meta-Llama-3.1-8B-Instruct")
    assert run.requests is not None and [r[0] for r in run.requests] == [0.0, 0.25, 0.6]


def test_a_report_without_requests_uses_its_metrics() -> None:
    bench = first_benchmark()
    del bench["requests"]
    run = run_of(bench)
    assert (run.requests, run.num_requests, run.prompt_tokens, run.output_tokens) == (None, 3, 200, 24)
    assert run.measured["itl_s"] == pytest.approx(0.00911)  # the report's own mean


def _change(bench: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = bench
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value


MALFORMED = [
    # (key path in the first benchmark, new value or KeyError to delete, field reported, words)
    ("config.strategy", KeyError, "benchmarks[0].config.strategy", "missing: expected the benchmark's scheduling"),
    ("config.strategy.type_", "qps", "benchmarks[0].config.strategy.type_", "unknown strategy 'qps'"),
    ("config.strategy.type_", 3, "benchmarks[0].config.strategy.type_", "expected text, got a number 3"),
    ("config.strategy", {"type_": "concurrent"}, "benchmarks[0].config.strategy.streams", "missing: expected a number"),
    (
        "metrics.request_totals",
        KeyError,
        "benchmarks[0].metrics.request_totals",
        "missing: expected the benchmark's request",
    ),
    ("metrics.request_totals.successful", 0, "benchmarks[0].requests", "no request succeeded"),
    ("metrics", [], "benchmarks[0].metrics", "expected an object, got a list"),
    (
        "requests.successful.1.prompt_tokens",
        "many",
        "benchmarks[0].requests.successful[1].prompt_tokens",
        "got text 'many'",
    ),
    ("requests.successful.1.output_tokens", KeyError, "benchmarks[0].requests.successful[1].output_tokens", "missing"),
    (
        "metrics.time_to_first_token_ms.successful.mean",
        "slow",
        "benchmarks[0].metrics.time_to_first_token_ms.successful.mean",
        "expected a finite number, got text 'slow'",
    ),
]


@pytest.mark.parametrize(("path", "value", "field", "words"), MALFORMED)
def test_a_malformed_report_is_refused_in_one_line(
    tmp_path: Path, path: str, value: Any, field: str, words: str
) -> None:
    report = copy.deepcopy(REPORT)
    _change(report["benchmarks"][0], path, value)
    file = tmp_path / "report.json"
    file.write_text(json.dumps(report), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_data([file], FileOptions("H100-SXM"))
    assert (caught.value.source, caught.value.field_path) == (str(file), field), str(caught.value)
    assert words in caught.value.problem and "\n" not in str(caught.value)


def test_benchmarks_must_be_objects(tmp_path: Path) -> None:
    file = tmp_path / "report.json"
    file.write_text(json.dumps({"benchmarks": [1]}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"report\.json: benchmarks\[0\]: expected an object, got a number"):
        read_data([file], FileOptions("H100-SXM"))
