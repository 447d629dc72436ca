"""The documented example: docs/data/trtllm-published.csv holds exactly what its cited rows of the
public serving results say, and calibrating on a third of it predicts the rest as the docs report."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from conftest import REPO, SHARED

from clustersim.calibration.fit import calibrate, choose_training_rows, prepare
from clustersim.calibration.measurements import Measurement, read_measurements
from clustersim.calibration.parameters import DEFAULT_ENGINE_FIELDS, GPU_FIELDS
from clustersim.calibration.report import scores
from clustersim.config.catalogue import Catalogue

EXAMPLE = REPO / "docs" / "data" / "trtllm-published.csv"
PUBLISHED = SHARED / "published" / "serving_results.csv"
needs_data = pytest.mark.skipif(
    not PUBLISHED.is_file(), reason=f"{PUBLISHED} is absent (shared ground truth not mounted)"
)


def citations() -> dict[int, tuple[str, str, str]]:
    """Each data row's line -> (serving_results row id, 'value' or 'notes', the rest of its comment)."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    cited = {}
    for number, line in enumerate(lines, start=1):
        if line and not line.startswith(("#", "hardware,")):
            found = re.fullmatch(r"# (\S+) (value|notes): (.*)", lines[number - 2])
            assert found, f"line {number} has no citation comment above it"
            cited[number] = (found.group(1), found.group(2), found.group(3))
    return cited


def check_value(row: Measurement, published: dict[str, str]) -> None:
    assert published["isl"] == str(row.prompt_tokens) and published["osl"] == str(row.output_tokens)
    assert published["load"] == f"batch {row.load:g}"
    if published["metric"] == "ttft":
        assert row.measured == {"ttft_s": pytest.approx(float(published["value"]) / 1e3)}
    else:
        assert published["metric"] == "output_tokens_per_s" and published["unit"] == "tok/s"
        per_gpu = float(published["value"])
        assert row.measured == {"output_tokens_per_s": pytest.approx(per_gpu * int(published["n_gpu"]))}


def check_note(row: Measurement, published: dict[str, str], quoted: str) -> None:
    assert quoted in published["notes"], (quoted, published["notes"])
    if found := re.fullmatch(r"ISL(\d+): ([\d.]+) ms", quoted):
        assert row.prompt_tokens == int(found.group(1)) and row.output_tokens == 1 and row.load == 1
        assert row.measured == {"ttft_s": pytest.approx(float(found.group(2)) / 1e3)}
    else:
        found = re.fullmatch(r"BS(\d+) (\d+)/(\d+): ([\d.]+)", quoted)
        assert found, quoted
        assert (row.load, row.prompt_tokens, row.output_tokens) == tuple(float(g) for g in found.groups()[:3])
        per_gpu = float(found.group(4))
        assert row.measured == {"output_tokens_per_s": pytest.approx(per_gpu * int(published["n_gpu"]))}


@needs_data
def test_every_row_is_what_its_cited_source_says() -> None:
    with PUBLISHED.open(newline="", encoding="utf-8") as handle:
        published = {r["id"]: r for r in csv.DictReader(handle)}
    rows = {row.line: row for row in read_measurements(EXAMPLE).rows}
    cited = citations()
    assert set(cited) == set(rows) and len(rows) == 12
    for line, (row_id, column, rest) in cited.items():
        source = published[row_id]
        assert source["engine"].startswith("TRT-LLM") and int(source["tp"]) == rows[line].tensor_parallel
        assert rows[line].weight_precision == source["precision"].lower()
        if column == "value":
            check_value(rows[line], source)
        else:
            quoted = re.search(r'"([^"]+)"', rest)
            assert quoted, rest
            check_note(rows[line], source, quoted.group(1))


def _scores(tmp_path: Path, fields: tuple[str, ...]) -> dict:
    """The docs' command on the example: fit ``fields`` on a seeded third, score every row."""
    data = read_measurements(EXAMPLE)
    train = choose_training_rows(len(data.rows), None, 0.33, 0)
    engine = Catalogue.builtin().engine("trtllm")
    overrides = ["scheduler.policy=static", "cluster.frontend=false", "kv.gpu_memory_frac=0.99"]  # as the docs' command
    setup = prepare(data, engine, fields, train, overrides)
    assert setup.notes == ()  # every batch held whole, as gptSessionBenchmark held it
    table = scores(calibrate(setup, train, tmp_path))
    assert table["held out"].count() == table["base (test rows)"].count() == 8
    return {name: column.mape() for name, column in table.items()}


@pytest.mark.slow
def test_fitting_host_times_on_a_third_leaves_the_rest_where_the_base_has_it(tmp_path: Path) -> None:
    """As docs/validation.md (block calibrate): host times are not what these rows miss, so fitting them
    leaves the held-out error within a point of the base profile's."""
    found = _scores(tmp_path, DEFAULT_ENGINE_FIELDS)
    assert found["held out"] <= found["base (test rows)"] + 1.0, found


@pytest.mark.slow
def test_fitting_the_gpus_too_on_four_rows_is_underdetermined(tmp_path: Path) -> None:
    """As docs/validation.md (block calibrate-gpu): six parameters on four rows fit those rows closely and
    predict the rest worse than the base profile; the leave-one-out error says so without the test rows."""
    found = _scores(tmp_path, (*DEFAULT_ENGINE_FIELDS, *GPU_FIELDS))
    assert found["leave-one-out"] >= found["in-sample"] + 5.0, found
    assert found["held out"] > found["base (test rows)"], found
