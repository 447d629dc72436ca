"""The engine's HTTP front end: a single first-come-first-served server before each replica."""

from __future__ import annotations

import math

import pytest
import yaml
from conftest import read_requests, read_steps

from clustersim.config.catalogue import Catalogue
from clustersim.frontend import MAX_STREAMING_SHARE, FrontEnd

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
    engine.pop("frontend_fitted_latency_s", None)
    engine.pop("frontend_per_prompt_token_s", None)
    engine["frontend_per_request_s"] = {"value": 0.5, "source": "test: 0.5 s per request"}
    engine["frontend_per_output_token_s"] = {"value": 0.25, "source": "test: 0.25 s per output token"}
    path = tmp_path / "with-frontend.yaml"
    path.write_text(yaml.safe_dump(engine))
    return path.name


def test_requests_are_parsed_one_at_a_time_with_streaming_as_a_load(run_mapping, engine_file):
    rows = read_requests(run_mapping(scenario(engine_file)))
    # request 0: parsed 0 -> 0.5 s; request 1, sent with it, parsed from 0.5 s while request 0 streams
    # (at the replica's modelled rate, hundreds of tokens a second, x 0.25 s: the capped share), but
    # streaming takes no more than request 0's 3 tokens x 0.25 s: 0.5 + 0.75 s, to 1.75 s
    # request 2: arrives at 10 s, when both have ended: nothing streams, its parse takes 0.5 s
    assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx([0.5, 1.75, 10.5])
    # the replica finished request 0 within milliseconds and is idle when each request reaches it
    assert [r["arrival_at_s"] for r in rows] == [0.0, 0.0, 10.0]  # TTFT counts from the client's send


def test_a_parse_slows_while_requests_stream(run_mapping, engine_file):
    """Request 0 (3 tokens) completes within milliseconds of reaching the replica at 0.5 s, leaving its
    3 x 0.25 s of streaming to the server: request 1, sent at 1 s, is parsed once that is done (the
    server busy from 0.5 s: 0.75 s of streaming, then 0.5 s of parsing, to 1.75 s). Request 1 (2,000
    tokens) then streams far faster than the server can (~150 tokens a second x 0.25 s); request 2,
    sent at 3 s, is parsed while its tokens wait: at the capped share, its 0.5 s parse takes 0.5 /
    (1 - 0.9) = 5 s."""
    mapping = scenario(engine_file)
    mapping["workload"]["tenants"][0]["arrival"]["requests"] = [
        {"arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": 3},
        {"arrival_at_s": 1.0, "prompt_tokens": 4, "output_tokens": 2000},
        {"arrival_at_s": 3.0, "prompt_tokens": 4, "output_tokens": 2},
    ]
    for fast in (True, False):
        run = run_mapping({**mapping, "simulation": {"fast_forward": fast}})
        rows = read_requests(run)
        assert rows[1]["finished_at_s"] > 8.0  # still streaming when request 2's parse ends
        assert run.summary["frontend"]["max_delay_s"] == pytest.approx(0.5 / (1.0 - 0.9))  # request 2's
        # it joins request 1's decodes at the end of the step running when it reaches the replica
        assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx([0.5, 1.75, 8.0], abs=0.02)


def test_each_prompt_is_tokenized_on_the_one_thread(run_mapping, engine_file, tmp_path):
    """0.1 s per prompt token on top of 0.5 s per request: the two 4-token prompts sent together are
    parsed 0 -> 0.9 s and from 0.9 s, beside request 0's 3 tokens of streaming (0.75 s), to 2.55 s."""
    path = tmp_path / engine_file
    engine = yaml.safe_load(path.read_text())
    engine["frontend_per_prompt_token_s"] = {"value": 0.1, "source": "test: 0.1 s per prompt token"}
    path.write_text(yaml.safe_dump(engine))
    rows = read_requests(run_mapping(scenario(engine_file)))
    assert [r["first_scheduled_at_s"] for r in rows[:2]] == pytest.approx([0.9, 2.55])


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
    # busy 3 x 0.5 s + 6 tokens x 0.25 s = 3 s; delays 0.5 + 1.75 + 0.5 s over 3 requests
    assert front["num_requests"] == 3
    assert front["mean_busy_frac"] == pytest.approx(3.0 / summary["makespan_s"])
    assert front["mean_delay_s"] == pytest.approx((0.5 + 1.75 + 0.5) / 3)
    assert front["max_delay_s"] == pytest.approx(1.75)
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


def with_latency(tmp_path, engine_file: str, latency_s: float) -> str:
    engine = yaml.safe_load((tmp_path / engine_file).read_text())
    engine["name"] = "with-latency"
    engine["frontend_fitted_latency_s"] = {"value": latency_s, "source": "test: 2 s of passage"}
    (tmp_path / "with-latency.yaml").write_text(yaml.safe_dump(engine))
    return "with-latency.yaml"


def test_a_requests_passage_is_latency_that_occupies_no_server(run_mapping, engine_file, tmp_path):
    """2 s of latency on top of 0.5 s of work: requests 0 and 1, sent together, are parsed 0 -> 0.5 s and
    0.5 -> 1.0 s (request 0 does not stream yet: it is still on its way) and reach the replica 2 s after
    their parses end; the server parses request 1 while request 0 passes. Work charged 2.5 s would
    have held request 1 until 5 s."""
    engine = with_latency(tmp_path, engine_file, 2.0)
    for fast in (True, False):
        run = run_mapping({**scenario(engine), "simulation": {"fast_forward": fast}})
        rows = sorted(read_requests(run), key=lambda r: r["request_id"])
        assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx([2.5, 3.0, 12.5])
        front = run.summary["frontend"]
        assert front["mean_delay_s"] == pytest.approx((2.5 + 3.0 + 2.5) / 3)
        assert front["mean_busy_frac"] == pytest.approx(3.0 / run.summary["makespan_s"])  # the work alone


def test_a_request_on_its_way_at_the_horizon_is_recorded_unfinished_and_counts_as_sent(
    run_mapping, engine_file, tmp_path
):
    engine = with_latency(tmp_path, engine_file, 2.0)
    for fast in (True, False):
        mapping = {**scenario(engine), "stop": {"horizon_s": 11.0}, "simulation": {"fast_forward": fast}}
        rows = read_requests(run_mapping(mapping))
        assert sorted(r["request_id"] for r in rows) == [0, 1, 2]  # request 2: parsed at 10.5 s, due at 12.5 s
        last = next(r for r in rows if r["request_id"] == 2)
        assert last["status"] == "unfinished" and last["first_scheduled_at_s"] is None
    raw = scenario(engine)
    raw["cluster"]["num_replicas"] = 2
    raw["router"] = {"kind": "least_outstanding"}
    raw["workload"]["tenants"][0]["arrival"]["requests"] = [
        {"arrival_at_s": t, "prompt_tokens": 4, "output_tokens": 2} for t in (0.0, 1.0)
    ]
    rows = sorted(read_requests(run_mapping(raw)), key=lambda r: r["request_id"])
    assert [r["replica"] for r in rows] == [0, 1]  # at 1 s request 0 is on its way to replica 0


class _Clock:
    now = 0.0


class _Request:
    def __init__(self, request_id: int, output_tokens: int) -> None:
        self.request_id, self.output_tokens, self.prompt_tokens = request_id, output_tokens, 4
        self.status, self.first_token_at_s, self.finished_at_s = "running", math.nan, math.nan

    def completed(self, first_token_at_s: float, finished_at_s: float) -> _Request:
        self.status, self.first_token_at_s, self.finished_at_s = "completed", first_token_at_s, finished_at_s
        return self


def test_the_streaming_rate_is_the_requests_making_tokens_at_one_requests_rate():
    clock = _Clock()
    front = FrontEnd(clock, 0.0, 0.001)  # type: ignore[arg-type]  # no parse: each reaches its replica at once
    requests = [_Request(i, 101) for i in range(6)]
    for request in requests:
        front.submit(request, lambda _: None)  # type: ignore[arg-type]
    assert front.streaming_rate() == 0.0  # none has made a token yet
    for request in requests[:5]:
        front.first_token(request)  # type: ignore[arg-type]
    assert front.streaming_rate() == 0.0  # none has completed: no token rate known yet
    clock.now = 2.0
    front.ended(requests[0].completed(1.0, 2.0))  # type: ignore[arg-type]  # 100 tokens in 1 s
    assert front.streaming_rate() == pytest.approx(4 * 100)  # four streaming at 100 tokens/s; one waits
    requests[1].status = "rejected"
    front.ended(requests[1])  # type: ignore[arg-type]  # ended without a rate of its own
    assert front.streaming_rate() == pytest.approx(3 * 100)
    clock.now = 2.5
    front.ended(requests[2].completed(2.0, 2.5))  # type: ignore[arg-type]  # 200 tokens/s: the mean of two
    assert front.streaming_rate() == pytest.approx(2 * 150)
    assert front.streaming_share() == pytest.approx(2 * 150 * 0.001)  # nothing waits: the work they bring


def test_a_parse_takes_the_share_streaming_leaves():
    """A request streaming 50 tokens a second at 10 ms each brings half the server's time; its first
    token's 10 ms waits at 0 s. A parse of 0.1 s starting then gets a tenth of the server while that
    waits (drained at 0.9 - 0.5 a second: 25 ms, 2.5 ms of parsing), then half: 0.025 + 0.0975 / 0.5."""
    clock = _Clock()
    front = FrontEnd(clock, 0.0, 0.01)  # type: ignore[arg-type]
    front.modelled_tokens_per_s = lambda num_seqs, context_tokens: 50.0 * num_seqs
    request = _Request(0, 101)
    front.submit(request, lambda _: None)  # type: ignore[arg-type]
    front.first_token(request)  # type: ignore[arg-type]
    assert front.streaming_share() == MAX_STREAMING_SHARE  # its first token waits to be streamed
    assert front.parse_s(0.1) == pytest.approx(0.025 + 0.0975 / 0.5)
    clock.now = 1.0  # drained long since: the share is the work the stream brings
    assert front.parse_s(0.1) == pytest.approx(0.1 / 0.5)
    fast = _Request(1, 101)
    front.submit(fast, lambda _: None)  # type: ignore[arg-type]
    front.first_token(fast)  # type: ignore[arg-type]  # two: 100 tokens/s x 10 ms, more than the server
    assert front.parse_s(0.1) == pytest.approx(0.1 / (1.0 - MAX_STREAMING_SHARE))


def test_a_wave_sent_together_waits_for_the_parses_before_it_not_the_waves_streaming(run_mapping, engine_file):
    """Four requests of 2 tokens sent together. Each parse after the first starts while the request
    handed over just before streams (the others have ended, within milliseconds of reaching the
    replica): 0.5 s of parsing beside at most its 2 tokens x 0.25 s, not beside the streaming of the
    whole wave (4 x 2 x 0.25 s) charged in one piece."""
    wave = [{"arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": 2} for _ in range(4)]
    mapping = scenario(engine_file)
    mapping["workload"]["tenants"][0]["arrival"]["requests"] = wave
    rows = read_requests(run_mapping(mapping))
    assert sorted(r["first_scheduled_at_s"] for r in rows) == pytest.approx([0.5, 1.5, 2.5, 3.5])


def test_a_request_in_a_front_end_counts_as_sent_to_its_replica(run_mapping, engine_file):
    """Two requests sent together to two replicas routed to the least outstanding: the first is still in
    replica 0's front end when the second is routed, so the second goes to replica 1."""
    raw = scenario(engine_file)
    raw["cluster"]["num_replicas"] = 2
    raw["router"] = {"kind": "least_outstanding"}
    rows = read_requests(run_mapping(raw))
    assert [r["replica"] for r in rows[:2]] == [0, 1]
    assert [r["first_scheduled_at_s"] for r in rows[:2]] == pytest.approx([0.5, 0.5])  # parsed side by side


def test_a_parse_slows_when_streaming_starts_during_it(run_mapping, engine_file):
    """Three requests sent together: request 0 (3 tokens) is parsed 0 -> 0.5 s; request 1 (2,000
    tokens) from 0.5 s beside request 0's 3 tokens of streaming, to 1.75 s; request 2 from 1.75 s, at
    full speed until request 1 makes its first token ~10 ms later and streams far faster than the
    server can (0.25 s a token): the rest of its 0.5 s parse gets a tenth of the server, ~4.9 s more
    (it reaches the replica mid-step and is scheduled at the step's end)."""
    wave = [{"arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": n} for n in (3, 2000, 1)]
    mapping = scenario(engine_file)
    mapping["workload"]["tenants"][0]["arrival"]["requests"] = wave
    result = run_mapping(mapping)
    rows, steps = read_requests(result), read_steps(result)
    prefill_s = next(s["duration_s"] for s in steps if s["started_at_s"] == 1.75)  # request 1's, alone
    handed_s = 1.75 + prefill_s + (0.5 - prefill_s) / (1.0 - MAX_STREAMING_SHARE)
    end_s = next(e for s in steps if s["started_at_s"] < handed_s <= (e := s["started_at_s"] + s["duration_s"]))
    expected = [0.5, 1.75, end_s]  # request 2 scheduled at the end of the step it reached the replica in
    assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx(expected, abs=1e-9)


def test_before_any_completion_the_replicas_modelled_rate_is_the_streaming_rate():
    clock = _Clock()
    front = FrontEnd(clock, 0.0, 0.001)  # type: ignore[arg-type]
    seen: list[tuple[int, float]] = []

    def modelled(num_seqs: int, context_tokens: float) -> float:
        seen.append((num_seqs, context_tokens))
        return 50.0 * num_seqs  # 50 tokens/s each

    front.modelled_tokens_per_s = modelled
    requests = [_Request(i, 101) for i in range(3)]
    for request in requests:
        front.submit(request, lambda _: None)  # type: ignore[arg-type]
        front.first_token(request)  # type: ignore[arg-type]
    assert front.streaming_rate() == pytest.approx(3 * 50)
    assert seen[-1] == (3, pytest.approx(3 * (4 + 101 / 2)))  # three at their mean contexts
    clock.now = 2.0
    front.ended(requests[0].completed(1.0, 2.0))  # type: ignore[arg-type]  # 100 tokens/s measured
    assert front.streaming_rate() == pytest.approx(2 * 100)  # the measured rate from now on
    assert front.parse_s(0.1) == pytest.approx(0.1 / (1 - 0.2))


def slow_streamer(tmp_path, per_output_token_s: float) -> str:
    """An engine whose API server has no per-request work and streams a token in ``per_output_token_s``."""
    engine = Catalogue.builtin().engine("vllm-v1").model_dump(mode="json", exclude_none=True)
    name = f"streams-in-{per_output_token_s * 1e3:g}-ms"
    engine["name"], engine["aliases"] = name, []
    for field in ("frontend_fitted_per_request_s", "frontend_fitted_latency_s", "frontend_per_prompt_token_s"):
        engine.pop(field, None)
    engine["frontend_per_request_s"] = {"value": 0.0, "source": "test: no parse"}
    engine["frontend_per_output_token_s"] = {"value": per_output_token_s, "source": "test: a slow stream"}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(engine))
    return f"{name}.yaml"


def lone_requests(engine_file: str, output_tokens: list[int], gap_s: float = 30.0) -> dict:
    mapping = scenario(engine_file)
    mapping["workload"]["tenants"][0]["arrival"]["requests"] = [
        {"arrival_at_s": k * gap_s, "prompt_tokens": 4, "output_tokens": n} for k, n in enumerate(output_tokens)
    ]
    return mapping


def test_tokens_made_faster_than_the_server_streams_them_reach_the_client_late(run_mapping, tmp_path):
    """One sequence of Llama-3.1-8B on an H100 decodes ~150 tokens a second; a server that streams 100
    a second falls behind from the first token, and the last of 1,000 reaches the client 999 x 10 ms
    after the first left the engine: the client's TPOT is the server's, not the engine's."""
    mapping = lone_requests(slow_streamer(tmp_path, 0.01), [1000, 1000, 20])
    engine_rows = read_requests(run_mapping(lone_requests(slow_streamer(tmp_path, 0.0), [1000, 1000, 20])))
    for fast in (True, False):
        run = run_mapping({**mapping, "simulation": {"fast_forward": fast}})
        rows = read_requests(run)
        lags = [row["finished_at_s"] - engine["finished_at_s"] for row, engine in zip(rows, engine_rows, strict=True)]
        front = run.summary["frontend"]
        assert front["max_stream_lag_s"] == pytest.approx(max(lags)) and max(lags) > 3.0
        assert front["mean_stream_lag_s"] == pytest.approx(sum(lags) / 3)
        for row, engine in zip(rows, engine_rows, strict=True):
            # the first token waits only for its own streaming: nothing is ahead of it
            assert row["first_token_at_s"] == pytest.approx(engine["first_token_at_s"] + 0.01, abs=1e-9)
            made_s = engine["finished_at_s"] - engine["first_token_at_s"]
            assert made_s < 0.8 * 999 * 0.01  # the engine alone: faster than the server streams
            n = row["output_tokens"]  # (the server's feed is the estimated rate: the last request's is a bit off)
            assert row["finished_at_s"] == pytest.approx(row["first_token_at_s"] + (n - 1) * 0.01, abs=0.002)
            assert row["status"] == "completed"


def test_a_server_that_keeps_up_delivers_as_the_engine_makes_them(run_mapping, tmp_path):
    """At 1 ms a token the server streams 1,000 a second, far above one sequence's rate: no token waits
    for another, each reaches its client its own 1 ms after the engine made it."""
    rows = read_requests(run_mapping(lone_requests(slow_streamer(tmp_path, 0.001), [1000, 20])))
    engine_rows = read_requests(run_mapping(lone_requests(slow_streamer(tmp_path, 0.0), [1000, 20])))
    assert [(r["first_token_at_s"], r["finished_at_s"]) for r in rows] == pytest.approx(
        [(r["first_token_at_s"] + 0.001, r["finished_at_s"] + 0.001) for r in engine_rows], abs=1e-12
    )


def test_a_burst_queues_behind_the_streaming_of_the_requests_before_it(run_mapping, tmp_path):
    """Four requests sent together stream 4 x ~150 tokens a second into a server that streams 200: the
    tokens queue first come first served, so each request's first token waits behind the tokens made
    before it and the last token of all reaches its client about when the server has streamed every
    token made (4 x 400 x 5 ms = 8 s), long after the engine finished (~2.7 s)."""
    mapping = lone_requests(slow_streamer(tmp_path, 0.005), [400] * 4, gap_s=0.0)
    for fast in (True, False):
        rows = read_requests(run_mapping({**mapping, "simulation": {"fast_forward": fast}}))
        last_s = max(r["finished_at_s"] for r in rows)
        assert last_s == pytest.approx(4 * 400 * 0.005, rel=0.05)
        assert all(r["finished_at_s"] - r["first_token_at_s"] > 399 * 0.005 for r in rows)


def test_a_request_whose_last_token_is_on_its_way_at_the_horizon_is_recorded_with_its_arrival(run_mapping, tmp_path):
    """The engine makes request 0's 1,000 tokens by ~6.5 s; the server streams its last at ~10 s: a
    horizon at 8 s finds it done at its engine, its last token due at its client at ~10 s. It is
    recorded once, completed (every token made), with the time its last token arrives."""
    mapping = {**lone_requests(slow_streamer(tmp_path, 0.01), [1000]), "stop": {"horizon_s": 8.0}}
    for fast in (True, False):
        (row,) = read_requests(run_mapping({**mapping, "simulation": {"fast_forward": fast}}))
        assert row["status"] == "completed"
        assert row["finished_at_s"] == pytest.approx(row["first_token_at_s"] + 999 * 0.01)


def test_a_closed_loop_user_sends_again_when_its_last_token_arrives(run_mapping, tmp_path):
    mapping = lone_requests(slow_streamer(tmp_path, 0.01), [])
    mapping["workload"]["tenants"][0] = {
        "name": "t",
        "arrival": {"kind": "closed_loop", "num_users": 1, "think_time": {"kind": "fixed", "time_s": 0.0}},
        "prompt_tokens": {"kind": "fixed", "tokens": 4},
        "output_tokens": {"kind": "fixed", "tokens": 500},
    }
    mapping["stop"] = {"max_requests": 3}
    for fast in (True, False):
        rows = read_requests(run_mapping({**mapping, "simulation": {"fast_forward": fast}}))
        assert [r["arrival_at_s"] for r in rows[1:]] == pytest.approx([r["finished_at_s"] for r in rows[:-1]])
        assert rows[0]["finished_at_s"] == pytest.approx(rows[0]["first_token_at_s"] + 499 * 0.01)


@pytest.fixture
def two_visit_engine(tmp_path):
    """0.5 s to parse a request, 0.1 s a prompt token to tokenize it, no streaming work; with the
    tokenizing queued behind the parses waiting (``frontend_tokenize_after_queued``) or not."""

    def write(after_queued: bool) -> str:
        engine = Catalogue.builtin().engine("vllm-v1").model_dump(mode="json", exclude_none=True)
        name = f"two-visit-{after_queued}".lower()
        engine.update(name=name, aliases=[])
        for field in ("frontend_fitted_per_request_s", "frontend_fitted_latency_s", "frontend_per_output_token_s"):
            engine.pop(field, None)
        engine["frontend_per_request_s"] = {"value": 0.5, "source": "test: 0.5 s per request"}
        engine["frontend_per_prompt_token_s"] = {"value": 0.1, "source": "test: 0.1 s per prompt token"}
        engine["frontend_tokenize_after_queued"] = {"value": after_queued, "source": "test: the rule or not"}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(engine))
        return f"{name}.yaml"

    return write


@pytest.mark.parametrize(
    ("arrivals_s", "after_queued", "handed_s"),
    [
        # a burst: each request parsed (0.5 s) and tokenized (4 x 0.1 s) in turn ...
        ([0.0] * 4, False, [0.9, 1.8, 2.7, 3.6]),
        # ... or every parse first, then the tokenizing, in arrival order: the last is handed over as late
        ([0.0] * 4, True, [2.4, 2.8, 3.2, 3.6]),
        # request 2, sent at 0.7 s, is queued behind request 0's tokenizing (queued at 0.5 s) and before
        # request 1's (queued when its parse ends at 1.0 s): 0 tokenized 1.0-1.4, 2 parsed 1.4-1.9, 1 tokenized
        # 1.9-2.3, 2 tokenized 2.3-2.7
        ([0.0, 0.0, 0.7], True, [1.4, 2.3, 2.7]),
        # one request alone: the same either way
        ([0.0], True, [0.9]),
    ],
)
def test_a_request_is_tokenized_after_the_parses_queued_when_its_own_ended(
    run_mapping, two_visit_engine, arrivals_s, after_queued, handed_s
):
    mapping = scenario(two_visit_engine(after_queued))
    requests = [{"arrival_at_s": t, "prompt_tokens": 4, "output_tokens": 2} for t in arrivals_s]
    mapping["workload"]["tenants"][0]["arrival"]["requests"] = requests
    found = []
    for fast in (True, False):
        run = run_mapping({**mapping, "simulation": {"fast_forward": fast}})
        rows = read_requests(run)
        found.append(rows)
        assert [r["first_scheduled_at_s"] for r in rows] == pytest.approx(handed_s, abs=1e-9)
        # the server's work is the same either way: 0.5 + 0.4 s a request
        assert run.summary["frontend"]["mean_busy_frac"] * run.summary["makespan_s"] == pytest.approx(
            0.9 * len(arrivals_s)
        )
    assert found[0] == found[1]
