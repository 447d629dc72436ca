"""``transfers.png``: a disaggregated run's trip from prompt to first token, and the KV held for transfers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import explicit_scenario

from clustersim.analysis.figures import write_figures
from clustersim.analysis.transfersfig import held_bytes, trip_parts_s
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.runner import run_scenario

TRANSFERS = pd.DataFrame(
    {
        "request_id": [0, 1, 2, 3, 0],
        "kv_bytes": [100.0, 50.0, 10.0, 20.0, 100.0],
        "prefilled_at_s": [1.0, 2.0, 3.0, 4.0, 4.5],
        "pulled_at_s": [1.0, 2.5, 3.0, math.nan, 4.5],
        "started_at_s": [1.5, 3.0, math.nan, math.nan, 4.5],
        "landed_at_s": [2.0, 4.0, math.nan, math.nan, 5.0],  # request 2 was still moving when the run stopped
        # request 3 was let go at 5 (lost); request 0 moved again after a retry (no first token then)
        "released_at_s": [2.0, 4.0, math.nan, 5.0, 5.0],
    }
)
REQUESTS = pd.DataFrame({"request_id": [0, 1, 2, 3], "first_token_at_s": [3.0, 5.5, math.nan, math.nan]})


def test_the_trip_of_each_landed_transfer_by_part() -> None:
    parts = trip_parts_s(TRANSFERS, REQUESTS)
    assert parts.to_dict("list") == {
        "prefilled_at_s": [1.0, 2.0],
        "decode wait": [0.0, 0.5],
        "link wait": [0.5, 0.5],
        "on the link": [0.5, 1.0],
        "to first token": [1.0, 1.5],
    }


def test_kv_held_is_each_prompts_bytes_from_its_end_until_it_is_let_go() -> None:
    # bins [0, 2), [2, 4), [4, 6): 100 B over [1, 2) and again over [4.5, 5); 50 B over [2, 4); 10 B
    # from 3 to the run's end at 6; 20 B over [4, 5)
    held = held_bytes(TRANSFERS, np.array([0.0, 2.0, 4.0, 6.0]), 6.0)
    assert held.tolist() == [100 * 1 / 2, (50 * 2 + 10 * 1) / 2, (10 * 2 + 20 * 1 + 100 * 0.5) / 2]


def test_a_disaggregated_run_gets_the_figure(tmp_path: Path) -> None:
    raw = explicit_scenario(
        [(0.0, 20, 3), (0.5, 10, 1)],
        cluster={"groups": [{"count": 1, "role": "prefill"}, {"count": 1, "role": "decode"}]},
        disaggregation={"link": {"kind": "roce"}},
    )
    result = run_scenario(LoadedScenario(scenario_from_mapping(raw, "d.yaml"), "d.yaml", tmp_path), tmp_path / "run")
    names = [path.name for path in write_figures(result.out_dir, tmp_path / "figures")]
    assert "transfers.png" in names and "lifecycle.png" not in names
