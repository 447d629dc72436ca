"""The Python API: run (by name, path or dict; overrides both ways; in memory), load, sweep and plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import clustersim
from clustersim.cli import main
from clustersim.errors import ClusterSimError

TINY = {
    "name": "tiny-api",
    "seed": 5,
    "workload": {
        "tenants": [
            {
                "name": "t",
                "arrival": {"kind": "poisson", "rate_per_s": 30.0},
                "prompt_tokens": {"kind": "fixed", "tokens": 64},
                "output_tokens": {"kind": "fixed", "tokens": 8},
            }
        ]
    },
    "stop": {"max_requests": 30},
    "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
    "cost": {"kind": "unit", "step_time_s": 0.01},
}


def _comparable(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "simulator"}


def test_run_in_memory_equals_the_command(tmp_path: Path) -> None:
    result = clustersim.run("static-vs-continuous", in_memory=True, scheduler__policy="static")
    assert result.out_dir is None and result.scenario.scheduler.policy == "static"
    assert result.summary["makespan_s"] == 14.0 and result.requests.num_rows == 6
    assert set(result.requests.column_names) >= {"request_id", "first_token_at_s", "max_itl_s"}
    command = CliRunner().invoke(
        main, ["run", "static-vs-continuous", "--set", "scheduler.policy=static", "--out", str(tmp_path / "c")]
    )
    assert command.exit_code == 0, command.output
    written = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert _comparable(result.summary) == _comparable(written)
    assert result.scenario_sha256 == clustersim.load(tmp_path / "c").scenario_sha256


def test_a_dict_with_overrides_both_ways(tmp_path: Path) -> None:
    one = clustersim.run(TINY, out=tmp_path / "a", overrides={"cluster.num_replicas": 2}, stop__max_requests=20)
    assert one.out_dir == tmp_path / "a" and one.summary["num_requests"]["arrived"] == 20
    assert len(one.summary["kv_blocks_per_replica"]) == 2
    same = clustersim.run(TINY, in_memory=True, cluster__num_replicas=2, overrides={"stop.max_requests": 20})
    assert _comparable(same.summary) == _comparable(one.summary)
    assert same.requests.equals(clustersim.load(tmp_path / "a").requests)
    frame = same.to_pandas("steps")
    assert len(frame) == same.steps.num_rows


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: clustersim.run({**TINY, "clustr": {}}, in_memory=True), "scenario dict: clustr: unknown field (did you mean 'cluster'?)"),
        (lambda: clustersim.run(TINY, in_memory=True, cluster__nope=1), "cluster.nope: unknown field"),
        (lambda: clustersim.run("no-such-scenario", in_memory=True), "no-such-scenario: no such file"),
        (lambda: clustersim.run(TINY, in_memory=True, out="x"), "give out or in_memory, not both"),
    ],
)  # fmt: skip
def test_bad_input_is_the_one_line_error(call, message: str) -> None:
    with pytest.raises(ClusterSimError) as caught:
        call()
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_load_refuses_what_is_not_a_finished_run(tmp_path: Path) -> None:
    clustersim.run(TINY, out=tmp_path / "r")
    (tmp_path / "r" / "INCOMPLETE").write_text("killed\n")
    with pytest.raises(ClusterSimError, match="did not finish"):
        clustersim.load(tmp_path / "r")
    with pytest.raises(ClusterSimError, match="not a run folder"):
        clustersim.load(tmp_path)
    with pytest.raises(ClusterSimError, match="no such run folder"):
        clustersim.load(tmp_path / "nothing")


def test_sweep_and_plan_from_dicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tiny.yaml").write_text(json.dumps(TINY), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    sweep = clustersim.sweep(
        {"base": "tiny.yaml", "axes": [{"path": "cluster.num_replicas", "values": [1, 2]}], "seeds": 2},
        out=tmp_path / "s",
        jobs=1,
    )
    assert sweep.stats_table.column("num_replicas").to_pylist() == [1, 2]
    assert sweep.stats_table.column("num_ok").to_pylist() == [2, 2]
    point = clustersim.load(tmp_path / "s" / "runs" / "num_replicas=2" / "seed=6")
    assert point.scenario.cluster.num_replicas == 2 and point.scenario.seed == 6
    plan = clustersim.plan(
        {"base": "tiny.yaml", "slo": {"ttft_s": 0.05, "percentile": 90}, "seeds": 1,
         "replicas": {"min": 1, "max": 4}, "options": [{"name": "h100"}]},
        out=tmp_path / "p",
    )  # fmt: skip
    assert plan.answers[0].replicas.num_replicas is not None
    assert (tmp_path / "p" / "plan.parquet").is_file()


def test_a_missing_trace_says_where_it_looked_and_how_to_point_at_it(tmp_path: Path) -> None:
    # as after a plain install: a scenario naming a public trace that is not shipped beside it
    scenario = {**TINY, "workload": {"tenants": [{"name": "t", "arrival": {
        "kind": "trace", "path": "../../shared/ground_truth/traces/azure2023_conv.csv", "format": "azure"}}]}}  # fmt: skip
    folder = tmp_path / "site" / "clustersim" / "_data" / "scenarios"
    folder.mkdir(parents=True)
    (folder / "replay.yaml").write_text(json.dumps(scenario), encoding="utf-8")
    with pytest.raises(ClusterSimError) as caught:
        clustersim.run(folder / "replay.yaml", in_memory=True)
    message = str(caught.value)
    assert f"no such file: {tmp_path / 'site' / 'clustersim' / 'shared' / 'ground_truth'}" in message
    assert message.endswith("; point at the file with --set workload.tenants.0.arrival.path=FILE")
