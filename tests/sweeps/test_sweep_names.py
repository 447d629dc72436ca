"""A sweep whose ``set`` or axes name a field the scenario lacks is refused before any point runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny_yaml

from clustersim.errors import ConfigError
from clustersim.sweeps import load_sweep, run_sweep

TINY = tiny_yaml("tiny-sweep", seed=3, rate_per_s=40.0, max_requests=20)
RATE_AXIS = "  - {path: workload.tenants.0.arrival.rate_per_s, name: rate_per_s, values: [10, 20]}\n"


def _refusal(tmp_path: Path, body: str, base: str = TINY) -> str:
    (tmp_path / "tiny.yaml").write_text(base, encoding="utf-8")
    (tmp_path / "sweep.yaml").write_text(f"name: names\nbase: tiny.yaml\n{body}", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        run_sweep(load_sweep(tmp_path / "sweep.yaml"), tmp_path / "tiny.yaml", tmp_path / "out", jobs=1)
    assert not (tmp_path / "out").exists()  # refused before the folder was made
    return str(caught.value)


@pytest.mark.parametrize(
    ("body", "field", "problem"),
    [
        (f"set:\n  schedular.max_num_seqs: 8\naxes:\n{RATE_AXIS}", "set.schedular.max_num_seqs", "did you mean 'scheduler'"),
        ("axes:\n  - {path: workload.tenants.0.arival.rate_per_s, values: [10, 20]}\n", "axes[0].path", "did you mean 'arrival'"),
        ("axes:\n  - {path: workload.tenants.4.arrival.rate_per_s, values: [10, 20]}\n", "axes[0].path", "not an index"),
        (f"axes:\n{RATE_AXIS}  - {{path: scheduler, values: [{{policy: continuous}}, {{polcy: continuous}}]}}\n",
         "axes[1].values", "did you mean 'policy'"),
    ],
)  # fmt: skip
def test_a_name_the_scenario_lacks_is_refused_naming_the_sweep_field(
    tmp_path: Path, body: str, field: str, problem: str
) -> None:
    message = _refusal(tmp_path, body)
    assert message.startswith(f"sweep: {field}: ")  # run_sweep's default source name
    assert problem in message


def test_an_unknown_field_in_the_base_scenario_is_blamed_on_the_base(tmp_path: Path) -> None:
    message = _refusal(tmp_path, f"axes:\n{RATE_AXIS}", TINY + "extra_field: 1\n")
    assert ": base: extra_field: unknown field" in message


def test_a_bad_value_is_still_each_points_own_failure(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    (tmp_path / "sweep.yaml").write_text(
        "name: values\nbase: tiny.yaml\naxes:\n  - {path: scheduler.max_num_seqs, values: [8, -1]}\n", encoding="utf-8"
    )
    result = run_sweep(load_sweep(tmp_path / "sweep.yaml"), tmp_path / "tiny.yaml", tmp_path / "out", jobs=1)
    assert [row["status"] for row in result.rows] == ["ok", "failed"]
    assert "max_num_seqs" in result.rows[1]["error"]


def test_an_interval_keeps_the_means_significant_digits():
    from clustersim.sweeps.printout import with_interval

    assert with_interval(0.4, 0.375, 0.425, 1.0) == "0.400 ± 0.025"  # not "0.4 ± 0.0"
    assert with_interval(0.264, 0.247, 0.281, 1.0) == "0.264 ± 0.017"
    assert with_interval(0.0384, 0.0374, 0.0394, 1e3) == "38.40 ± 1.00"
    assert with_interval(1.5, None, None, 1.0) == "1.5"  # no interval: as before
    assert with_interval(float("nan"), 0.0, 1.0, 1.0) == "-"
