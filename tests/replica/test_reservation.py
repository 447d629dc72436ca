"""SGLang's reserve for the running requests' future tokens (``scheduler.decode_reserve``)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import explicit_scenario, read_requests

from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import scenario_from_mapping
from clustersim.config.reserve import DecodeReserve
from clustersim.errors import ConfigError
from clustersim.replica.reservation import Reservation
from clustersim.replica.seats import SeatSet
from clustersim.workload.request import Request

# decays by 0.25 a decode step to nothing; no clip, no retraction room
QUICK = {"init_ratio": 0.5, "min_ratio": 0.0, "decay_steps": 2, "clip_tokens": 100, "retract_steps": 0}


def _kv(num_blocks: int) -> dict[str, object]:
    return {"block_size_tokens": 1, "num_blocks": num_blocks, "watermark_frac": 0.0}


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_request_waits_until_the_running_ones_future_tokens_leave_it_room(run_mapping, fast_forward):
    # A (4 + 10 tokens) runs alone from t=0; B (4 + 10) arrives at t=1 and needs 14 free tokens.
    # At t=1: 16 free, A has 9 tokens to make at ratio 0.25: 16 - 2.25 = 13.75, not above 14: B waits.
    # At t=2: 15 free (A took a block), ratio 0: B is admitted; without the reserve, at t=1.
    requests = [(0.0, 4, 10), (1.0, 4, 10)]
    simulation = {"fast_forward": fast_forward}
    held = explicit_scenario(
        requests, policy="sglang", scheduler={"decode_reserve": QUICK}, kv=_kv(20), simulation=simulation
    )
    free = explicit_scenario(requests, policy="sglang", kv=_kv(20), simulation=simulation)
    assert [r["first_scheduled_at_s"] for r in read_requests(run_mapping(held))] == [0.0, 2.0]
    assert [r["first_scheduled_at_s"] for r in read_requests(run_mapping(free))] == [0.0, 1.0]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_request_alone_is_never_held_back(run_mapping, fast_forward):
    # 12 + 8 tokens are not fewer than the 20 free, but nothing runs: the pool holds it
    raw = explicit_scenario(
        [(0.0, 12, 8)],
        policy="sglang",
        scheduler={"decode_reserve": {**QUICK, "init_ratio": 1.0}},
        kv=_kv(20),
        simulation={"fast_forward": fast_forward},
    )
    assert read_requests(run_mapping(raw))[0]["status"] == "completed"


def test_the_ratio_decays_per_decode_step_to_its_floor_and_starts_again_when_idle():
    reservation = Reservation(DecodeReserve(**{**QUICK, "min_ratio": 0.1}))
    assert [reservation.ratio(d) for d in range(4)] == [0.5, 0.3, 0.1, 0.1]
    reservation.idle(10)
    assert reservation.ratio(10) == 0.5
    assert reservation.ratio(11) == 0.3


def test_a_retraction_sets_the_ratio_from_what_the_remaining_requests_made():
    seats = SeatSet()
    for request_id, output in enumerate((10, 30)):
        request = Request(request_id=request_id, tenant="t", arrival_at_s=0.0, prompt_tokens=4, output_tokens=output)
        seat = seats.add(request, 4)
        seats.advance_prefill(seat, 4)
        seats.start_decoding(seat, 0)  # first token made at step 0, decodes from step 1
    reservation = Reservation(DecodeReserve(**{**QUICK, "retract_steps": 5}))
    # before step 6: each made 1 + 5 tokens; (12 made + 5 x 2) / 40 may make
    assert seats.tokens_left(6) == (10 - 6) + (30 - 6)
    reservation.retracted(seats, 6)
    assert reservation.ratio(7) == pytest.approx(22 / 40)


def test_a_run_finds_the_first_step_the_single_step_rule_admits():
    rng = np.random.default_rng(3)
    for _ in range(200):
        rule = DecodeReserve(
            init_ratio=0.9, min_ratio=0.05, decay_steps=int(rng.integers(1, 50)), clip_tokens=50, retract_steps=0
        )
        reservation = Reservation(rule)
        reservation.from_index = int(rng.integers(0, 20))
        steps = int(rng.integers(1, 60))
        free = np.sort(rng.integers(0, 400, steps))[::-1].copy()
        running = np.sort(rng.integers(0, 600, steps))[::-1].copy()
        need = int(rng.integers(1, 300))
        first_index = int(rng.integers(0, 40))
        expected = next(
            (k for k in range(steps) if reservation.fits(need, int(free[k]), int(running[k]), first_index + k, 0)), -1
        )
        assert reservation.first_fit(need, free, running, first_index) == expected


def test_the_floor_cannot_exceed_the_start():
    raw = explicit_scenario([(0.0, 4, 4)], policy="sglang", scheduler={"decode_reserve": {**QUICK, "min_ratio": 0.6}})
    with pytest.raises((ConfigError, ValueError), match=re.escape("min_ratio (0.6) must be at most init_ratio (0.5)")):
        scenario_from_mapping(raw, "test.yaml")


def test_the_sglang_engine_reserves_and_vllm_does_not():
    catalogue = Catalogue.builtin()
    reserve = catalogue.engine("sglang", "x").scheduler.decode_reserve
    assert reserve is not None and reserve.value.init_ratio == 0.7 and reserve.value.clip_tokens == 4096
    assert catalogue.engine("vllm-v1", "x").scheduler.decode_reserve is None
