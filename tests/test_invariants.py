"""The end-of-run invariant checks catch each kind of violation, with a message that says which."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario

from clustersim.config.loader import scenario_from_mapping
from clustersim.invariants import InvariantViolation, ReplicaEndState, check_requests, check_run, check_steps

SCENARIO = scenario_from_mapping(explicit_scenario([(0.0, 8, 3)]), "t.yaml")


@pytest.fixture
def logs(run_mapping):
    result = run_mapping(explicit_scenario([(0.0, 8, 3), (0.5, 8, 2), (5.0, 8, 1)]))
    return pq.read_table(result.out_dir / "requests.parquet"), pq.read_table(result.out_dir / "steps.parquet")


def replace(table, column, values):
    return table.set_column(table.schema.get_field_index(column), column, [values])


def test_a_clean_run_passes(logs):
    requests, steps = logs
    assert check_requests(requests) == [] and check_steps(steps, requests, SCENARIO) == []
    check_run(requests, steps, SCENARIO, [ReplicaEndState(0, 0)])


def test_duplicate_ids_and_unknown_status(logs):
    requests, _ = logs
    broken = replace(replace(requests, "request_id", [0, 0, 1]), "status", ["completed", "vanished", "completed"])
    problems = check_requests(broken)
    assert "request ids are not exactly 0..2 once each" in problems
    assert "1 requests have a status other than completed/rejected/unfinished/lost" in problems


def test_causality(logs):
    requests, _ = logs
    first_token = requests.column("first_token_at_s").to_pylist()
    broken = replace(requests, "first_token_at_s", [first_token[0], first_token[1], 99.0])
    assert any(p.startswith("causality:") for p in check_requests(broken))


def test_token_conservation_and_limits(logs):
    requests, steps = logs
    more = replace(steps, "num_emitted_tokens", [x + 1 for x in steps.column("num_emitted_tokens").to_pylist()])
    assert any(p.startswith("token conservation:") for p in check_steps(more, requests, SCENARIO))
    inconsistent = replace(steps, "num_decode_tokens", [x + 1 for x in steps.column("num_decode_tokens").to_pylist()])
    assert "a step emitted fewer tokens than it decoded, or more than its decodes plus prefills" in check_steps(
        inconsistent, requests, SCENARIO
    )
    crowded = replace(steps, "num_seqs", [9] * steps.num_rows)
    assert "a step ran 9 sequences > max_num_seqs 4" in check_steps(crowded, requests, SCENARIO)
    full = replace(
        replace(steps, "kv_used_blocks", [10**6] * steps.num_rows), "kv_peak_used_blocks", [10**6] * steps.num_rows
    )
    assert any("more KV blocks" in p for p in check_steps(full, requests, SCENARIO))
    assert not check_steps(steps, requests, SCENARIO)
    # a run's peak (the most at any of its steps' ends) is at least what its last step held
    below = replace(steps, "kv_peak_used_blocks", [x - 1 for x in steps.column("kv_used_blocks").to_pylist()])
    assert any("peak below" in p for p in check_steps(below, requests, SCENARIO))


def test_violation_lists_every_problem(logs):
    requests, steps = logs
    with pytest.raises(InvariantViolation, match=r"broke 1 of its invariants .*KV blocks not conserved on replica 0"):
        check_run(requests, steps, SCENARIO, [ReplicaEndState(5, 4)])


def test_each_replica_is_held_to_its_own_limits(logs):
    """A pipeline-parallel replica's step may hold PP x the budget and, for some engines, PP x the
    sequences: each step is checked against its own replica's limits, and the message names them."""
    import pyarrow as pa

    from clustersim.logstats import StepTotals

    requests, steps = logs
    wide = steps
    for column, value in (("num_seqs", 6), ("num_prefill_tokens", 150), ("num_prefill_seqs", 2)):
        wide = replace(wide, column, [value] * steps.num_rows)
    wide = replace(replace(wide, "num_decode_tokens", [0] * steps.num_rows), "num_emitted_tokens", [0] * steps.num_rows)
    on_pp_replica = replace(wide, "replica", [1] * steps.num_rows)
    wide = replace(wide, "replica", [0] * steps.num_rows)  # the same column type as on_pp_replica's
    # replica 0: 100 tokens and 4 seats; replica 1 (PP 2, seats per micro-batch): 200 tokens and 8 seats
    budgets, caps = [100, 200], [4, 8]
    assert StepTotals.of(on_pp_replica, 2, budgets, caps).over_tokens is None
    assert StepTotals.of(on_pp_replica, 2, budgets, caps).over_seqs is None
    both = StepTotals.of(pa.concat_tables([on_pp_replica, wide]), 2, budgets, caps)
    assert both.over_tokens == (150, 100) and both.over_seqs == (6, 4)
    problems = check_steps(both, requests, SCENARIO)
    assert "a step ran 6 sequences > max_num_seqs 4" in problems
    assert "a step batched 150 tokens > its token budget 100" in problems
