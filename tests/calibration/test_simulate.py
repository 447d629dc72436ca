"""A measured setting as a scenario: the benchmark each load kind describes, and its predicted figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.calibration.measurements import Measurement
from clustersim.calibration.simulate import (
    RowProfiles,
    arrival_times_s,
    batch_kv_note,
    predict,
    row_mapping,
    row_scenario,
)
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


# ----------------------------------------------------------------------------- rows from benchmark tools' files
LISTED = ((0.0, 128, 16), (0.9, 64, 12), (0.4, 96, 8))


def test_listed_requests_of_a_rate_row_arrive_at_their_send_times() -> None:
    raw = row_mapping(row("rate_per_s", 2.0, requests=LISTED), "vllm-v0.6")
    arrival = raw["workload"]["tenants"][0]["arrival"]
    assert arrival["requests"] == [  # in time order, each with its own lengths
        {"arrival_at_s": 0.0, "prompt_tokens": 128, "output_tokens": 16},
        {"arrival_at_s": 0.4, "prompt_tokens": 96, "output_tokens": 8},
        {"arrival_at_s": 0.9, "prompt_tokens": 64, "output_tokens": 12},
    ]
    assert "stop" not in raw and raw["scheduler"]["max_num_seqs"] == 256


def test_listed_requests_without_send_times_draw_the_rate_in_order() -> None:
    untimed = tuple((None, p, o) for _, p, o in LISTED)
    even = row_mapping(row("rate_per_s", 4.0, requests=untimed, interarrival_cv=0.0), "vllm-v0.6")
    requests = even["workload"]["tenants"][0]["arrival"]["requests"]
    assert [(r["arrival_at_s"], r["prompt_tokens"]) for r in requests] == [(0.0, 128), (0.25, 64), (0.5, 96)]
    poisson = row("rate_per_s", 4.0, requests=untimed)
    times = arrival_times_s(poisson, 3)
    assert times[0] == 0.0 and times == sorted(times) and times == arrival_times_s(poisson, 3)  # seeded
    assert times != [0.0, 0.25, 0.5]


def test_listed_requests_of_a_batch_arrive_together_and_run_together() -> None:
    raw = row_mapping(row("batch", 3, requests=LISTED), "vllm-v0.6")
    arrival = raw["workload"]["tenants"][0]["arrival"]
    assert [r["arrival_at_s"] for r in arrival["requests"]] == [0.0, 0.0, 0.0]
    assert [r["prompt_tokens"] for r in arrival["requests"]] == [128, 64, 96]  # the file's order
    assert raw["scheduler"]["max_num_batched_tokens"] == 8192  # at least the prompts together (288)


def test_listed_requests_of_a_closed_loop_draw_their_lengths() -> None:
    raw = row_mapping(row("concurrency", 2, requests=LISTED), "vllm-v0.6")
    tenant = raw["workload"]["tenants"][0]
    assert tenant["arrival"]["kind"] == "closed_loop" and tenant["arrival"]["num_users"] == 2
    assert tenant["prompt_tokens"] == {"kind": "empirical", "values": [128, 64, 96]}
    assert tenant["output_tokens"] == {"kind": "empirical", "values": [16, 12, 8]}
    assert raw["stop"] == {"max_requests": 3}


def test_a_summary_row_simulates_the_benchmarks_count_and_arrival_spread() -> None:
    closed = row_mapping(row("concurrency", 8, num_requests=20), "vllm-v0.6", num_requests=200)
    assert closed["stop"] == {"max_requests": 20}  # the benchmark's own count, not 4 per user
    gamma = row_mapping(row("rate_per_s", 3.0, num_requests=50, interarrival_cv=0.5), "vllm-v0.6")
    assert gamma["workload"]["tenants"][0]["arrival"] == {"kind": "gamma", "rate_per_s": 3.0, "cv": 0.5}
    assert gamma["stop"] == {"max_requests": 50}
    constant = row_mapping(row("rate_per_s", 3.0, interarrival_cv=0.0), "vllm-v0.6")
    assert constant["workload"]["tenants"][0]["arrival"]["cv"] == 1e-3  # the schema's most regular gamma


def test_a_replayed_row_runs_and_predicts_tails_too(tmp_path: Path) -> None:
    replayed = row("rate_per_s", 2.0, requests=LISTED)
    figures = predict(row_scenario(replayed, "vllm-v0.6", tmp_path / "d.json"), profiles_of(replayed), tmp_path / "r")
    assert set(figures) == {"ttft_s", "itl_s", "output_tokens_per_s", "ttft_p99_s", "itl_p99_s"}
    assert figures["ttft_p99_s"] is not None and figures["ttft_s"] is not None
    assert figures["ttft_p99_s"] >= figures["ttft_s"] > 0


def test_a_batch_the_kv_cache_cannot_hold_whole_is_noted_with_what_it_needs_and_what_is_held(tmp_path: Path) -> None:
    csv = tmp_path / "data.csv"
    big = row("batch", 60, prompt=128, output=2048, hardware="A100-80GB", model="Llama-2-7B")
    loaded = row_scenario(big, "trtllm", csv)
    note = batch_kv_note(big, loaded, profiles_of(big, "trtllm"))
    assert note is not None and note.startswith(f"{csv}:7: a batch of 60 needs up to 130,560 tokens of KV cache")
    held = int(note.split("replicas hold ")[1].split(" ")[0].replace(",", ""))
    assert 100_000 < held < 130_560 and "gpu_memory_frac 0.9" in note  # Llama-2-7B: 0.5 MB per token
    roomy = row_scenario(big, "trtllm", csv, ["kv.gpu_memory_frac=0.99"])  # the memory the benchmark used
    assert batch_kv_note(big, roomy, profiles_of(big, "trtllm")) is None
    small = row("batch", 8, prompt=128, output=2048, hardware="A100-80GB", model="Llama-2-7B")
    assert batch_kv_note(small, row_scenario(small, "trtllm", csv), profiles_of(small, "trtllm")) is None
    rate = row("rate_per_s", 60.0, prompt=128, output=2048, hardware="A100-80GB", model="Llama-2-7B")
    assert batch_kv_note(rate, row_scenario(rate, "trtllm", csv), profiles_of(rate, "trtllm")) is None  # batches only
