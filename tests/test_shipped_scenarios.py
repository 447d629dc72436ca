"""Every shipped scenario that does not need the shared data runs end to end (shortened) and keeps its invariants."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import SCENARIOS

from clustersim.config.loader import load_scenario
from clustersim.runner import run_scenario

SELF_CONTAINED = [
    p for p in sorted(SCENARIOS.glob("*.yaml")) if "../shared" not in p.read_text() and "shared/" not in p.read_text()
]


@pytest.mark.parametrize("path", SELF_CONTAINED, ids=lambda p: p.stem)
def test_shipped_scenario_runs(path: Path, tmp_path: Path):
    raw = yaml.safe_load(path.read_text())
    overrides = []
    if raw.get("stop", {}).get("max_requests", 0) > 300:
        overrides.append("stop.max_requests=300")
    result = run_scenario(load_scenario(path, overrides), tmp_path)
    counts = result.summary["num_requests"]
    assert counts["arrived"] > 0
    assert counts["completed"] + counts["rejected"] + counts["unfinished"] == counts["arrived"]
