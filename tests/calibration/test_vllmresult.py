"""vLLM's --save-result JSON: the load kind each traffic setting is, and one-line refusals of a
malformed file naming the key."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from clustersim.calibration.datafiles import FileOptions, read_data
from clustersim.calibration.jsonfields import JsonObject
from clustersim.calibration.vllmresult import is_vllm_result, vllm_run
from clustersim.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data" / "calibrate"
SUMMARY: dict[str, Any] = json.loads((DATA / "vllm-summary.json").read_text(encoding="utf-8"))
DETAILED: dict[str, Any] = json.loads((DATA / "vllm-detailed.json").read_text(encoding="utf-8"))


def run_of(changes: dict[str, Any], base: dict[str, Any] = SUMMARY, drop: tuple[str, ...] = ()) -> Any:
    value = {k: v for k, v in {**base, **changes}.items() if k not in drop}
    return vllm_run(JsonObject(value, "r.json"), 1)


@pytest.mark.parametrize(
    ("changes", "kind", "load", "cv"),
    [
        ({"request_rate": "inf", "max_concurrency": 4}, "concurrency", 4.0, 1.0),
        ({"request_rate": math.inf, "max_concurrency": None}, "batch", 40.0, 1.0),  # json.loads("Infinity")
        ({"request_rate": "inf", "max_concurrency": None}, "batch", 40.0, 1.0),
        ({"request_rate": 2.5, "max_concurrency": None}, "rate_per_s", 2.5, 1.0),
        ({"request_rate": 2.5, "max_concurrency": None, "burstiness": 4.0}, "rate_per_s", 2.5, 0.5),
    ],
)
def test_load_kind_of_each_traffic_setting(changes: dict[str, Any], kind: str, load: float, cv: float) -> None:
    run = run_of(changes)
    assert (run.load_kind, run.load, run.interarrival_cv) == (kind, load, cv)


def test_a_capped_rate_is_replayed_at_its_send_times() -> None:
    run = run_of({"max_concurrency": 2}, DETAILED)  # rate 2/s with at most 2 in flight
    assert run.load_kind == "rate_per_s" and run.load == pytest.approx(5 / 2.6)  # five sends over 2.6 s
    assert [r[0] for r in run.requests] == pytest.approx([0.0, 0.4, 1.3, 2.0, 2.6])
    with pytest.raises(ConfigError, match=r"^r\.json: max_concurrency: a request rate with a concurrency limit"):
        run_of({"max_concurrency": 2}, DETAILED, drop=("start_times",))
    with pytest.raises(ConfigError, match=r"^r\.json: ramp_up_strategy: .* needs start_times"):
        run_of({"ramp_up_strategy": "linear"}, SUMMARY)


def test_older_files_without_send_times_or_errors() -> None:
    run = run_of({}, DETAILED, drop=("start_times", "errors"))
    assert run.requests is not None and [r[0] for r in run.requests] == [None] * 5  # the failed one has 0 output
    assert run.load_kind == "rate_per_s" and run.num_requests == 5
    assert is_vllm_result(SUMMARY) and not is_vllm_result({"completed": 1})


MALFORMED = [
    # (changes, dropped keys, field, words)
    ({}, ("completed",), "completed", "missing: expected a number"),
    ({"completed": "40"}, (), "completed", "expected a finite number, got text '40'"),
    ({"completed": 0}, (), "completed", "no request completed"),
    ({"request_rate": "fast"}, (), "request_rate", "expected a positive number or 'inf', got 'fast'"),
    ({"request_rate": None}, (), "request_rate", "expected a positive number or 'inf', got None"),
    ({"max_concurrency": 2.5}, (), "max_concurrency", "expected a whole number of at least 0"),
    ({"mean_ttft_ms": "fast"}, (), "mean_ttft_ms", "expected a finite number, got text 'fast'"),
    ({"mean_itl_ms": -1.0}, (), "mean_itl_ms", "-1.0 must be at least 0"),
    ({}, ("total_input_tokens",), "total_input_tokens", "missing: expected a number"),
    (
        {"mean_ttft_ms": None, "mean_itl_ms": 0.0, "output_throughput": None, "p99_ttft_ms": None, "p99_itl_ms": None},
        (),
        "",
        "nothing measured",
    ),
]


@pytest.mark.parametrize(("changes", "drop", "field", "words"), MALFORMED)
def test_a_malformed_summary_is_refused_in_one_line(
    tmp_path: Path, changes: dict[str, Any], drop: tuple[str, ...], field: str, words: str
) -> None:
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps({k: v for k, v in {**SUMMARY, **changes}.items() if k not in drop}), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_data([path], FileOptions("H100-SXM"))
    assert (caught.value.source, caught.value.field_path) == (str(path), field)
    assert words in caught.value.problem and "\n" not in str(caught.value)


MALFORMED_DETAILED = [
    ({"output_lens": [16, 8, 0]}, "output_lens", "has 3 entries where the other per-request lists have 6"),
    ({"input_lens": [128, "96", 160, 64, 128, 112]}, "input_lens[1]", "expected a finite number, got text"),
    ({"input_lens": 128}, "input_lens", "expected a list, got a number 128"),
    ({"output_lens": [16, 8.5, 0, 12, 16, 10]}, "output_lens", "expected token counts"),
    ({"start_times": [1.0]}, "start_times", "has 1 entries"),
    ({"errors": ["x"] * 6}, "errors", "no request succeeded"),
]


@pytest.mark.parametrize(("changes", "field", "words"), MALFORMED_DETAILED)
def test_malformed_per_request_lists_are_refused(
    tmp_path: Path, changes: dict[str, Any], field: str, words: str
) -> None:
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps({**DETAILED, **changes}), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_data([path], FileOptions("H100-SXM"))
    assert caught.value.field_path == field and words in caught.value.problem, str(caught.value)
