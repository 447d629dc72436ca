"""A whole plan on a tiny scenario: the answer is the fewest replicas meeting the SLO in every seed
(checked against every smaller count), the table is ranked by price, and a rerun reuses every run."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import tiny_yaml

from clustersim.cli import main
from clustersim.plans import load_plan, run_plan_spec
from clustersim.sweeps import load_sweep, run_sweep

TINY = tiny_yaml(
    "tiny-plan", seed=7, rate_per_s=10.0, max_requests=120, extra="scheduler: {policy: continuous, max_num_seqs: 2}\n"
)

PLAN = """\
name: tiny
base: tiny.yaml
traffic: {rate_per_s: 60}
slo: {ttft_s: 0.1, percentile: 90}
seeds: 2
replicas: {min: 1, max: 16}
options:
  - {name: two-seats, set: {}}
  - {name: four-seats, set: {scheduler.max_num_seqs: 4}}
  - {name: too-big, set: {cluster.model: Llama-3.1-70B}}
prices_usd_per_gpu_hour: {H100-SXM: 2.0}
"""


@pytest.fixture
def plan_dir(tmp_path: Path) -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    (tmp_path / "plan.yaml").write_text(PLAN, encoding="utf-8")
    return tmp_path


def _verdicts(folder: Path, counts: list[int], max_num_seqs: int) -> list[bool]:
    """Every count run directly as a sweep at the plan's rate: met in every seed?"""
    (folder / "check.yaml").write_text(
        "name: check\nbase: tiny.yaml\n"
        f"set: {{workload.tenants.0.arrival.rate_per_s: 60.0, scheduler.max_num_seqs: {max_num_seqs}}}\n"
        f"axes: [{{path: cluster.num_replicas, values: {counts}}}]\nseeds: [7, 8]\n"
        "slo: {ttft_s: 0.1, percentile: 90}\n",
        encoding="utf-8",
    )
    result = run_sweep(load_sweep(folder / "check.yaml"), folder / "tiny.yaml", folder / "check", jobs=1)
    return [bool(row["slo_met_all_seeds"]) for row in result.stats_table.to_pylist()]


def test_the_answer_is_the_fewest_replicas_meeting_the_slo_in_every_seed(plan_dir: Path) -> None:
    spec = load_plan(plan_dir / "plan.yaml")
    result = run_plan_spec(spec, plan_dir / "tiny.yaml", plan_dir / "out", jobs=2)
    answers = {a.option.name: a for a in result.answers}
    two, four = answers["two-seats"].replicas.num_replicas, answers["four-seats"].replicas.num_replicas
    assert two is not None and four is not None and four <= two
    # brute force: every smaller count misses in some seed, the answer meets in both
    assert _verdicts(plan_dir, list(range(1, two + 1)), 2) == [False] * (two - 1) + [True]
    assert answers["too-big"].replicas.num_replicas is None
    assert "does not fit" in (answers["too-big"].replicas.reason or "")
    # far fewer evaluations than counts tried by brute force would be, for a bracket of 16
    assert len(answers["two-seats"].evaluations) <= 2 * two.bit_length() + 1

    table = pq.read_table(plan_dir / "out" / "plan.parquet").to_pylist()
    assert [row["option"] for row in table] == ["four-seats", "two-seats", "too-big"]
    assert [row["rank"] for row in table] == [1, 2, None]
    assert table[0]["num_gpus"] == four and table[0]["cost_usd_per_hour"] == pytest.approx(2.0 * four)
    assert table[0]["ttft_p90_s_mean"] <= 0.1
    evaluations = pq.read_table(plan_dir / "out" / "evaluations.parquet").to_pylist()
    assert {round(row["rate_per_s"], 9) for row in evaluations if row["option"] != "too-big"} == {60.0}


def test_a_plan_run_again_reuses_every_run(plan_dir: Path) -> None:
    spec = load_plan(plan_dir / "plan.yaml")
    first = run_plan_spec(spec, plan_dir / "tiny.yaml", plan_dir / "out", jobs=1)
    again = run_plan_spec(spec, plan_dir / "tiny.yaml", plan_dir / "out", jobs=1)
    assert [a.replicas.num_replicas for a in again.answers] == [a.replicas.num_replicas for a in first.answers]
    points = [pq.read_table(p).to_pylist() for p in (plan_dir / "out" / "evaluations").rglob("points.parquet")]
    ran = [row for table in points for row in table if row["status"] == "ok"]
    assert ran and all(row["reused"] for row in ran)


def test_the_plan_command_prints_the_ranked_table(plan_dir: Path) -> None:
    result = CliRunner().invoke(
        main, ["plan", str(plan_dir / "plan.yaml"), "--out", str(plan_dir / "cli"), "--jobs", "2"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "tiny: 60 req/s, p90 ttft_s <= 0.1, 2 seeds, met in every seed"
    assert lines[1] == "| rank | option | replicas | GPUs | $/h | $/M out tok | TTFT p90 ms | seeds met |"
    assert lines[3].startswith("| 1 | four-seats | ")
    assert lines[5].startswith("| - | too-big | none: ")
    assert (plan_dir / "cli" / "plan.md").read_text().splitlines()[0] == lines[1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slo: {ttft_s: 0.1}\noptions: [{name: a}]\n", "bad.yaml: slo.percentile or min_attainment_frac is needed"),
        ("slo: {ttft_s: 0.1, percentile: 99}\noptions: []\n", "bad.yaml: options: needs at least 1 item(s), got 0"),
        ("slo: {ttft_s: 0.1, percentile: 99}\noptions: [{name: a, set: {cluster.num_replicas: 2}}]\n",
         "option 'a' sets cluster.num_replicas: the plan searches it"),
        ("slo: {ttft_s: 0.1, percentile: 99}\noptoins: [{name: a}]\n", "did you mean 'options'"),
        ("slo: {ttft_s: 0.1, percentile: 99}\noptions: [{name: a}]\nreplicas: {min: 5, max: 2}\n",
         "max (2) must be at least min (5)"),
    ],
)  # fmt: skip
def test_a_bad_plan_file_is_one_line_and_exit_2(plan_dir: Path, text: str, message: str) -> None:
    (plan_dir / "bad.yaml").write_text("base: tiny.yaml\n" + text, encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(plan_dir / "bad.yaml"), "--out", str(plan_dir / "o")])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "bad.yaml" in result.stderr and message in result.stderr


def test_closed_loop_traffic_has_no_rate_to_scale(plan_dir: Path) -> None:
    text = TINY.replace(
        "{kind: poisson, rate_per_s: 10.0}", "{kind: closed_loop, num_users: 4, think_time: {kind: fixed, time_s: 0.1}}"
    )
    (plan_dir / "tiny.yaml").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(plan_dir / "plan.yaml"), "--out", str(plan_dir / "o")])
    assert result.exit_code == 2 and "closed_loop arrivals have no offered rate to scale" in result.stderr


def test_a_plan_judged_by_the_share_of_requests_meeting_the_targets(plan_dir: Path) -> None:
    text = PLAN.replace("slo: {ttft_s: 0.1, percentile: 90}", "slo: {ttft_s: 0.1}\nmin_attainment_frac: 0.95")
    (plan_dir / "goodput.yaml").write_text(text, encoding="utf-8")
    result = run_plan_spec(load_plan(plan_dir / "goodput.yaml"), plan_dir / "tiny.yaml", plan_dir / "g", jobs=2)
    answer = result.answers[0]
    assert answer.option.name == "two-seats" and answer.replicas.num_replicas is not None
    count = answer.replicas.num_replicas
    # brute force: every seed's share of requests within 100 ms TTFT, at the answer and one fewer
    (plan_dir / "check.yaml").write_text(
        "name: check\nbase: tiny.yaml\nset: {workload.tenants.0.arrival.rate_per_s: 60.0}\n"
        f"axes: [{{path: cluster.num_replicas, values: {[count - 1, count] if count > 1 else [count]}}}]\n"
        "seeds: [7, 8]\nslo: {ttft_s: 0.1}\n",
        encoding="utf-8",
    )
    sweep = run_sweep(load_sweep(plan_dir / "check.yaml"), plan_dir / "tiny.yaml", plan_dir / "check", jobs=1)
    shares: dict[int, list[float]] = {}
    for row in sweep.points_table.to_pylist():
        shares.setdefault(row["num_replicas"], []).append(row["slo_attainment_frac"])
    assert all(share >= 0.95 for share in shares[count])
    if count > 1:
        assert any(share < 0.95 for share in shares[count - 1])


SPLIT_PLAN = """\
name: split
base: tiny.yaml
traffic: {rate_per_s: 60}
slo: {ttft_s: 0.1, percentile: 90}
seeds: 2
replicas: {min: 1, max: 8}
options:
  - {name: co-located, set: {}}
  - name: split
    set:
      cluster.groups: [{count: 1, role: prefill}, {count: 1, role: decode}]
      disaggregation: {link: {kind: nvlink}}
prices_usd_per_gpu_hour: {H100-SXM: 2.0}
"""


def test_a_disaggregated_option_is_answered_with_the_cheapest_split_meeting_the_slo(plan_dir: Path) -> None:
    (plan_dir / "split.yaml").write_text(SPLIT_PLAN, encoding="utf-8")
    result = run_plan_spec(load_plan(plan_dir / "split.yaml"), plan_dir / "tiny.yaml", plan_dir / "out", jobs=2)
    answers = {a.option.name: a for a in result.answers}
    split = answers["split"].replicas.split
    assert split is not None and answers["split"].replicas.num_replicas == sum(split)
    evaluations = {e.split: e.met for e in answers["split"].evaluations}
    assert evaluations[split]
    p, d = split
    # one replica fewer in either pool misses (where that split was tried), so the answer is on the frontier
    assert evaluations.get((p - 1, d), False) is False and evaluations.get((p, d - 1), False) is False
    # every split that met costs at least as many GPUs (one GPU each here)
    assert all(sum(s) >= p + d for s, met in evaluations.items() if met)
    table = pq.read_table(plan_dir / "out" / "plan.parquet").to_pylist()
    row = next(r for r in table if r["option"] == "split")
    assert (row["num_prefill_replicas"], row["num_decode_replicas"], row["num_gpus"]) == (p, d, p + d)
    assert f"{p} prefill + {d} decode" in (plan_dir / "out" / "plan.md").read_text()
    colocated = next(r for r in table if r["option"] == "co-located")
    assert colocated["num_prefill_replicas"] is None
