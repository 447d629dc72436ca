"""A measured setting as a scenario: the benchmark each load kind describes, and its predicted figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.calibration.measurements import Measurement
from clustersim.calibration.simulate import RowProfiles, predict, row_mapping, row_scenario
from clustersim.config.catalogue import Catalogue
from clustersim.errors import ClusterSimError, ConfigError

CATALOGUE = Catalogue.builtin()


def row(load_kind: str, load: float, prompt: int = 32, output: int = 8, **changes: object) -> Measurement:
    fields: dict[str, object] = {
        "line": 7,
        "hardware": "H100-SXM",
        "model": "Llama-3.1-8B",
        "tensor_parallel": 1,
        "weight_precision": None,
        "load_kind": load_kind,
        "load": load,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "measured": {"ttft_s": 0.01},
    }
    return Measurement(**{**fields, **changes})  # type: ignore[arg-type]


def profiles_of(measurement: Measurement, engine: str = "vllm-v0.6") -> RowProfiles:
    return RowProfiles(
        CATALOGUE.hardware(measurement.hardware), CATALOGUE.model(measurement.model), CATALOGUE.engine(engine)
    )


def test_batch_is_that_many_requests_at_once_run_together() -> None:
    raw = row_mapping(row("batch", 300, prompt=64), "vllm-v0.6")
    arrival = raw["workload"]["tenants"][0]["arrival"]
    assert arrival["kind"] == "explicit" and len(arrival["requests"]) == 300
    assert arrival["requests"][0] == {"arrival_at_s": 0.0, "prompt_tokens": 64, "output_tokens": 8}
    assert raw["scheduler"] == {"max_num_seqs": 300, "max_num_batched_tokens": 300 * 64}  # the engine's policy
    assert "stop" not in raw and raw["seed"] == 0
    assert raw["cluster"] == {
        "num_replicas": 1,
        "hardware": "H100-SXM",
        "model": "Llama-3.1-8B",
        "tensor_parallel": 1,
        "engine": "vllm-v0.6",
    }


def test_concurrency_is_a_closed_loop_of_users_without_think_time() -> None:
    raw = row_mapping(row("concurrency", 100, weight_precision="fp8"), "vllm-v0.6", num_requests=200)
    tenant = raw["workload"]["tenants"][0]
    assert tenant["arrival"] == {
        "kind": "closed_loop",
        "num_users": 100,
        "think_time": {"kind": "fixed", "time_s": 0.0},
    }
    assert tenant["prompt_tokens"] == {"kind": "fixed", "tokens": 32}
    assert raw["stop"] == {"max_requests": 400}  # at least 4 per user
    assert raw["scheduler"]["max_num_seqs"] == 256 and raw["scheduler"]["max_num_batched_tokens"] == 8192
    assert raw["cluster"]["weight_precision"] == "fp8"


def test_rate_is_poisson_arrivals_until_the_requests_are_sent() -> None:
    raw = row_mapping(row("rate_per_s", 2.5, prompt=10_000), "vllm-v0.6", num_requests=50)
    assert raw["workload"]["tenants"][0]["arrival"] == {"kind": "poisson", "rate_per_s": 2.5}
    assert raw["stop"] == {"max_requests": 50}
    assert raw["scheduler"]["max_num_batched_tokens"] == 10_000  # one prompt fits a step


def test_overrides_apply_to_the_row_and_errors_name_its_line(tmp_path: Path) -> None:
    csv = tmp_path / "data.csv"
    loaded = row_scenario(row("batch", 4), "vllm-v0.6", csv, ["scheduler.policy=static"])
    assert loaded.scenario.scheduler.policy == "static" and loaded.base_dir == tmp_path
    with pytest.raises(ConfigError) as caught:
        row_scenario(row("batch", 4), "vllm-v0.6", csv, ["scheduler.policy=fifo"])
    assert caught.value.source == f"{csv}:7 (with --set)" and caught.value.field_path == "scheduler.policy"


def test_prediction_is_the_summary_of_the_benchmark(tmp_path: Path) -> None:
    single = row("batch", 1, prompt=128, output=2)
    figures = predict(row_scenario(single, "vllm-v0.6", tmp_path / "d.csv"), profiles_of(single), tmp_path / "run")
    vllm = CATALOGUE.engine("vllm-v0.6")
    slower = vllm.model_copy(update={"step_overhead_s": vllm.step_overhead_s.model_copy(update={"value": 0.101_15})})
    slow = predict(
        row_scenario(single, "vllm-v0.6", tmp_path / "d.csv"),
        RowProfiles(profiles_of(single).hardware, profiles_of(single).model, slower),
        tmp_path / "run",
    )
    assert figures["ttft_s"] is not None and figures["itl_s"] is not None and slow["ttft_s"] is not None
    assert slow["ttft_s"] - figures["ttft_s"] == pytest.approx(0.1)  # one step, 100 ms more fixed time
    assert figures["output_tokens_per_s"] == pytest.approx(2 / (figures["ttft_s"] + figures["itl_s"]))


def test_a_setting_the_replica_cannot_serve_is_refused(tmp_path: Path) -> None:
    too_long = row("batch", 1, prompt=200_000)
    with pytest.raises(ClusterSimError, match=r"d\.csv:7: only 0 of 1 requests completed"):
        predict(row_scenario(too_long, "vllm-v0.6", tmp_path / "d.csv"), profiles_of(too_long), tmp_path / "run")
