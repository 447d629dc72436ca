"""The engine's HTTP front end: a single first-come-first-served server before each replica."""

from __future__ import annotations

import math

import pytest
import yaml
from conftest import read_requests

from clustersim.config.catalogue import Catalogue
from clustersim.frontend import MAX_STREAMING_SHARE, STREAMING_TIME_CONSTANT_S, FrontEnd

# one replica of the roofline model (steps of milliseconds); the engine profile adds a front end
REQUESTS = [
    {"arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": 3},
    {"arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": 2},
    {"arrival_at_s": 10.0, "prompt_tokens": 4, "output_tokens": 1},
]


def scenario(engine: str, frontend: bool = True) -> dict:
    return {
        "name": "frontend",
        "seed": 1,
        "workload": {"tenants": [{"name": "t", "arrival": {"kind": "explicit", "requests": REQUESTS}}]},
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B", "engine": engine, "frontend": frontend},
        "scheduler": {"policy": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 64},
        "kv": {"prefix_caching": False},
    }


@pytest.fixture
def engine_file(tmp_path):
    engine = Catalogue.builtin().engine("vllm-v1").model_dump(mode="json", exclude_none=True)
    engine["name"] = "with-frontend"
    engine["aliases"] = []
    engine.pop("frontend_fitted_per_request_s", None)  # only the test's own front-end times
    engine.pop("frontend_per_prompt_token_s", None)
    engine["frontend_per_request_s"] = {"value": 0.5, "source": "test: 0.5 s per request"}
    engine["frontend_per_output_token_s"] = {"value": 0.25, "source": "test: 0.25 s per output token"}
    path = tmp_path / "with-frontend.yaml"
    path.write_text(yaml.safe_dump(engine))
    return path.name


def _later_parse_s(rows) -> float:
    """Request 2's parse: 0.5 s slowed by the share of the server that streaming requests 0 and 1 take."""
    rate = sum(r["output_tokens"] * math.exp((r["finished_at_s"] - 10.0) / STREAMING_TIME_CONSTANT_S)
               for r in rows[:2]) / STREAMING_TIME_CONSTANT_S  # fmt: skip
    return 0.5 / (1.0 - 0.25 * rate)


def test_requests_are_parsed_one_at_a_time_with_streaming_as_a_load(run_mapping, engine_file):
    rows = read_requests(run_mapping(scenario(engine_file)))
    # request 0: parsed 0 -> 0.5 s; request 1, sent with it, parsed 0.5 -> 1.0 s: nothing has been
    # streamed yet, and its parse does not wait for request 0's streaming
    # request 2: arrives at 10 s, parsed at 1 / (1 - rho) the speed, rho the streaming share of 0 and 1
    assert 0.5 < _later_parse_s(rows) < 0.55
    assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx([0.5, 1.0, 10.0 + _later_parse_s(rows)])
    # the replica finished request 0 within milliseconds and is idle when each request reaches it
    assert [r["arrival_at_s"] for r in rows] == [0.0, 0.0, 10.0]  # TTFT counts from the client's send


def test_each_prompt_is_tokenized_on_the_one_thread(run_mapping, engine_file, tmp_path):
    """0.1 s per prompt token on top of 0.5 s per request: the two 4-token prompts sent together are
    parsed 0 -> 0.9 s and 0.9 -> 1.8 s."""
    path = tmp_path / engine_file
    engine = yaml.safe_load(path.read_text())
    engine["frontend_per_prompt_token_s"] = {"value": 0.1, "source": "test: 0.1 s per prompt token"}
    path.write_text(yaml.safe_dump(engine))
    rows = read_requests(run_mapping(scenario(engine_file)))
    assert [r["first_scheduled_at_s"] for r in rows[:2]] == pytest.approx([0.9, 1.8])


def test_no_front_end_offline(run_mapping, engine_file):
    rows = read_requests(run_mapping(scenario(engine_file, frontend=False)))
    assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx([0.0, 0.0, 10.0])


def test_unit_cost_has_no_front_end(run_mapping, engine_file):
    rows = read_requests(run_mapping({**scenario(engine_file), "cost": {"kind": "unit", "step_time_s": 1.0}}))
    assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx([0.0, 0.0, 10.0])


def test_both_modes_agree(run_mapping, engine_file):
    fast = scenario(engine_file)
    step = {**fast, "simulation": {"fast_forward": False}}
    assert read_requests(run_mapping(fast)) == read_requests(run_mapping(step))


def test_the_summary_says_how_busy_the_front_end_was(run_mapping, engine_file):
    summary = run_mapping(scenario(engine_file)).summary
    front = summary["frontend"]
    # busy 3 x 0.5 s + 6 tokens x 0.25 s = 3 s; delays 0.5 + 1.0 + request 2's slowed parse over 3 requests
    later = _later_parse_s(read_requests(run_mapping(scenario(engine_file))))
    assert front["num_requests"] == 3
    assert front["mean_busy_frac"] == pytest.approx(3.0 / summary["makespan_s"])
    assert front["mean_delay_s"] == pytest.approx((0.5 + 1.0 + later) / 3)
    assert front["max_delay_s"] == pytest.approx(1.0)
    assert "frontend" not in run_mapping(scenario(engine_file, frontend=False)).summary


def test_a_request_still_in_the_front_end_at_the_horizon_is_recorded_unfinished(run_mapping, engine_file):
    # request 2 arrives at 10 s and would reach the replica at 10.5 s: the horizon at 10.2 s finds it in the
    # API server, in no replica's queue; it must still be in the log, once, as unfinished
    for fast in (True, False):
        mapping = {**scenario(engine_file), "stop": {"horizon_s": 10.2}, "simulation": {"fast_forward": fast}}
        rows = read_requests(run_mapping(mapping))
        assert sorted(r["request_id"] for r in rows) == [0, 1, 2]
        last = next(r for r in rows if r["request_id"] == 2)
        assert last["status"] == "unfinished" and last["first_scheduled_at_s"] is None


class _Clock:
    now = 0.0


def _completed(output_tokens: int):
    class Done:
        pass

    done = Done()
    done.output_tokens = output_tokens  # type: ignore[attr-defined]
    return done


def test_the_streaming_share_follows_the_completed_token_rate_and_is_capped():
    clock = _Clock()
    front = FrontEnd(clock, 0.003, 0.001)  # type: ignore[arg-type]
    for second in range(1, 201):  # a steady 100 tokens/s for 200 s: the estimate converges on it
        clock.now = float(second)
        front.streamed(_completed(100))  # type: ignore[arg-type]
    assert front.streaming_share(200.0) == pytest.approx(0.1, rel=0.06)
    # it decays when the streaming stops, one time constant at a time
    assert front.streaming_share(200.0 + STREAMING_TIME_CONSTANT_S) == pytest.approx(
        front.streaming_share(200.0) / math.e
    )
    busy = FrontEnd(clock, 0.003, 0.1)  # type: ignore[arg-type]  # 100 tokens/s x 0.1 s: more than the server
    for second in range(1, 201):
        clock.now = float(second)
        busy.streamed(_completed(100))  # type: ignore[arg-type]
    assert busy.streaming_share(200.0) == MAX_STREAMING_SHARE


def test_a_wave_sent_together_is_parsed_together_whatever_it_will_stream(run_mapping, engine_file):
    wave = [{"arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": 40} for _ in range(4)]
    mapping = scenario(engine_file)
    mapping["workload"]["tenants"][0]["arrival"]["requests"] = wave
    rows = read_requests(run_mapping(mapping))
    # each waits only for the parses before it (0.5 s each), not for 40 tokens x 0.25 s of streaming
    assert sorted(r["first_scheduled_at_s"] for r in rows) == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_a_request_in_a_front_end_counts_as_sent_to_its_replica(run_mapping, engine_file):
    """Two requests sent together to two replicas routed to the least outstanding: the first is still in
    replica 0's front end when the second is routed, so the second goes to replica 1."""
    raw = scenario(engine_file)
    raw["cluster"]["num_replicas"] = 2
    raw["router"] = {"kind": "least_outstanding"}
    rows = read_requests(run_mapping(raw))
    assert [r["replica"] for r in rows[:2]] == [0, 1]
    assert [r["first_scheduled_at_s"] for r in rows[:2]] == pytest.approx([0.5, 0.5])  # parsed side by side
