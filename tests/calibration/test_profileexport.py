"""GenAI-Perf and AIPerf profile exports: the load each layout describes, the configured lengths as a
fallback, and one-line refusals of a malformed export."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from clustersim.calibration.datafiles import FileOptions, read_data
from clustersim.calibration.jsonfields import JsonObject
from clustersim.calibration.profileexport import profile_export_run
from clustersim.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data" / "calibrate"
GENAI_PERF: dict[str, Any] = json.loads((DATA / "genai-perf-export.json").read_text(encoding="utf-8"))


def with_config(config: dict[str, Any], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    export = {k: v for k, v in copy.deepcopy(GENAI_PERF).items() if k not in drop}
    export["input_config"] = config
    return export


def run_of(export: dict[str, Any]) -> Any:
    return profile_export_run(JsonObject(export, "p.json"))


def test_genai_perf_request_rate_is_constant_interval() -> None:
    config = copy.deepcopy(GENAI_PERF["input_config"])
    config["perf_analyzer"]["stimulus"] = {"request_rate": 5.0}
    run = run_of(with_config(config))
    assert (run.load_kind, run.load, run.interarrival_cv) == ("rate_per_s", 5.0, 0.0)


def test_older_genai_perf_flat_arguments_and_configured_lengths() -> None:
    config = {"model": ["meta-llama/Llama-3.1-8B"], "concurrency": 2, "request_rate": None,
              "synthetic_input_tokens_mean": 300, "output_tokens_mean": 50}  # fmt: skip
    run = run_of(with_config(config, drop=("input_sequence_length", "output_sequence_length")))
    assert (run.model_id, run.load_kind, run.load) == ("meta-llama/Llama-3.1-8B", "concurrency", 2.0)
    assert (run.prompt_tokens, run.output_tokens) == (300, 50)


@pytest.mark.parametrize(
    ("loadgen", "kind", "load", "cv"),
    [
        ({"concurrency": 100, "request_rate_mode": "concurrency_burst"}, "concurrency", 100.0, 1.0),
        ({"request_rate": 4.0}, "rate_per_s", 4.0, 1.0),  # AIPerf's default mode: Poisson
        ({"request_rate": 4.0, "request_rate_mode": "constant"}, "rate_per_s", 4.0, 0.0),
        ({}, "concurrency", 1.0, 1.0),  # AIPerf's default: one user
    ],
)
def test_aiperf_loadgen(loadgen: dict[str, Any], kind: str, load: float, cv: float) -> None:
    config = {"endpoint": {"model_names": ["openai/gpt-oss-20b"]}, "loadgen": loadgen,
              "input": {"prompt": {"input_tokens": {"mean": 700}, "output_tokens": {"mean": 100}}}}  # fmt: skip
    run = run_of(with_config(config, drop=("input_sequence_length",)))
    assert (run.load_kind, run.load, run.interarrival_cv) == (kind, load, cv)
    assert (run.model_id, run.prompt_tokens, run.output_tokens) == ("openai/gpt-oss-20b", 700, 64)  # measured 64


MALFORMED = [
    # (change to the export, field reported, words)
    ({"input_config": {"model_names": ["m"]}}, "input_config.perf_analyzer.stimulus", "expected a concurrency or a request_rate"),
    ({"input_config": {"loadgen": {"concurrency": 4, "request_rate": 2.0}}}, "input_config.loadgen.concurrency", "a request rate with a concurrency limit"),
    ({"input_config": {"perf_analyzer": {"stimulus": {"concurrency": "eight"}}}}, "input_config.perf_analyzer.stimulus.concurrency", "got text 'eight'"),
    ({"input_config": {"perf_analyzer": {"stimulus": {"request_rate": -1}}}}, "input_config.perf_analyzer.stimulus.request_rate", "-1.0 must be positive"),
    ({"time_to_first_token": {"unit": "ms", "avg": "fast"}}, "time_to_first_token.avg", "expected a finite number, got text 'fast'"),
    ({"inter_token_latency": [9.8]}, "inter_token_latency", "expected an object, got a list"),
    ({"input_sequence_length": None, "input_config": {"perf_analyzer": {"stimulus": {"concurrency": 8}}}}, "input_sequence_length", "expected the mean length"),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "field", "words"), MALFORMED)
def test_a_malformed_export_is_refused_in_one_line(
    tmp_path: Path, changes: dict[str, Any], field: str, words: str
) -> None:
    path = tmp_path / "profile_export_genai_perf.json"
    path.write_text(json.dumps({**GENAI_PERF, **changes}), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_data([path], FileOptions("H100-SXM", model="Llama-3.1-8B"))
    assert (caught.value.source, caught.value.field_path) == (str(path), field), str(caught.value)
    assert words in caught.value.problem and "\n" not in str(caught.value)
