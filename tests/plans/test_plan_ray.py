"""The same sweep and plan on a local Ray and on the local process pool give the same tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import tiny_yaml

from clustersim.plans import load_plan, run_plan_spec
from clustersim.sweeps import load_sweep, run_sweep

ray = pytest.importorskip("ray", reason="Ray is not installed (python -m pip install 'clustersim[ray]')")

TINY = tiny_yaml(
    "tiny-ray", seed=11, rate_per_s=30.0, max_requests=60, extra="scheduler: {policy: continuous, max_num_seqs: 2}\n"
)

SWEEP = """\
name: on-ray
base: tiny.yaml
axes:
  - {path: workload.tenants.0.arrival.rate_per_s, name: rate_per_s, values: [10, 40]}
  - {path: cluster.model, name: model, values: [Llama-3.1-8B, Llama-3.1-70B]}
seeds: 2
"""

PLAN = """\
name: on-ray
base: tiny.yaml
traffic: {rate_per_s: 50}
slo: {ttft_s: 0.1, percentile: 90}
seeds: 2
replicas: {min: 1, max: 8}
options:
  - {name: two-seats}
  - {name: four-seats, set: {scheduler.max_num_seqs: 4}}
max_rate: {tolerance_frac: 0.1}
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, text in (("tiny.yaml", TINY), ("sweep.yaml", SWEEP), ("plan.yaml", PLAN)):
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


VARIABLE = ["wall_s", "reused"]


def test_a_sweep_on_ray_equals_the_local_pool(local_ray: None, folder: Path) -> None:
    spec = load_sweep(folder / "sweep.yaml")
    on_ray = run_sweep(spec, folder / "tiny.yaml", folder / "ray", backend="ray")
    local = run_sweep(spec, folder / "tiny.yaml", folder / "local", jobs=2)
    assert on_ray.num_failed == local.num_failed == 4  # the 70B points fail alike, and the rest run
    assert on_ray.points_table.drop(VARIABLE).equals(local.points_table.drop(VARIABLE))
    ran = sorted(p.parent.relative_to(folder / "local") for p in (folder / "local").rglob("summary.json"))
    assert len(ran) == 4
    for point in ran:
        for table in ("requests", "steps", "memory", "itl"):
            ray_rows = pq.read_table(folder / "ray" / point / f"{table}.parquet")
            assert ray_rows.equals(pq.read_table(folder / "local" / point / f"{table}.parquet")), (point, table)
    assert len(pq.read_table(folder / "ray" / "requests")) == len(pq.read_table(folder / "local" / "requests")) == 240
    # the files came back from the Ray workers into the run folders, point.json last
    assert (folder / "ray" / "runs" / "rate_per_s=40" / "model=Llama-3.1-8B" / "seed=12" / "point.json").is_file()


def test_a_plan_on_ray_gives_the_same_table(local_ray: None, folder: Path) -> None:
    spec = load_plan(folder / "plan.yaml")
    on_ray = run_plan_spec(spec, folder / "tiny.yaml", folder / "pray", backend="ray")
    local = run_plan_spec(spec, folder / "tiny.yaml", folder / "plocal", jobs=2)
    assert [a.replicas.num_replicas for a in on_ray.answers] == [a.replicas.num_replicas for a in local.answers]
    assert pq.read_table(folder / "pray" / "plan.parquet").equals(pq.read_table(folder / "plocal" / "plan.parquet"))
    assert (folder / "pray" / "plan.md").read_text() == (folder / "plocal" / "plan.md").read_text()
