"""The printout's scores: Pearson's r of the fitted predictions beside the MAPE, and the pairs a
parity figure draws."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from PIL import Image

from clustersim.analysis.calibration_parity import ParitySeries, write_calibration_parity
from clustersim.calibration.fit import Calibration, Setup
from clustersim.calibration.measurements import Measurement
from clustersim.calibration.report import fitted_pairs, format_report, format_scores, pearson_r
from clustersim.calibration.simulate import Prediction
from clustersim.config.catalogue import Catalogue


@pytest.mark.parametrize(
    ("measured", "predicted", "r"),
    [
        ([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], 1.0),
        ([1.0, 2.0, 3.0], [3.0, 2.0, 1.0], -1.0),
        ([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0], 0.8),  # cov 1 / (var 1.25)
        ([1.0, 2.0], [1.0, 2.0], None),  # fewer than 3 values
        ([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], None),  # a constant side has no correlation
    ],
)
def test_pearson_r_by_hand(measured: list[float], predicted: list[float], r: float | None) -> None:
    got = pearson_r(measured, predicted)
    assert got == (None if r is None else pytest.approx(r))


def _row(line: int, measured: dict[str, float]) -> Measurement:
    return Measurement(line, "H100-SXM", "Llama-3.1-8B", 1, None, "batch", 1, 32, 8, measured)  # type: ignore[arg-type]


def calibration_of(
    measured: list[dict[str, float]], predicted: list[Prediction], train: tuple[int, ...]
) -> Calibration:
    rows = tuple(_row(i + 2, m) for i, m in enumerate(measured))
    setup = Setup(rows, (), Catalogue.builtin().engine("vllm-v0.6"), {}, {}, ())
    predictions = dict(enumerate(predicted))
    return Calibration(setup, train, (), predictions, predictions, {}, 0)


def test_scores_table_gives_r_per_metric_over_every_row() -> None:
    ttft = [0.010, 0.020, 0.030, 0.040]
    calibration = calibration_of(
        [{"ttft_s": t, "output_tokens_per_s": 100.0} for t in ttft],
        [{"ttft_s": t * 1.1, "output_tokens_per_s": 100.0 + i} for i, t in enumerate(ttft)],
        train=(0, 1, 2),
    )
    pairs = fitted_pairs(calibration)
    assert [p[2] for p in pairs["ttft_s"]] == [False, False, False, True]  # the last row is held out
    table = format_scores(calibration).splitlines()
    assert table[0].rstrip().endswith("r (fitted)")
    ttft_line = next(line for line in table if line.startswith("TTFT ms"))
    assert ttft_line.endswith("+1.000 (4)")  # a 10% over-prediction everywhere is perfectly correlated
    assert next(line for line in table if line.startswith("out tok/s")).endswith("-")  # constant measurements
    assert next(line for line in table if line.startswith("overall")).endswith("-")


def test_p99s_are_scored_on_their_own_not_overall() -> None:
    calibration = calibration_of(
        [{"ttft_s": 0.010, "ttft_p99_s": 0.020}], [{"ttft_s": 0.011, "ttft_p99_s": 0.030}], train=(0,)
    )
    table = {line.split("  ")[0]: line for line in format_scores(calibration).splitlines()}
    assert "10.0% (1)" in table["TTFT ms"] and "50.0% (1)" in table["TTFT p99"]
    assert "10.0% (1)" in table["overall"]  # the mean only: what the fit minimises


def test_parity_figure_is_a_png(tmp_path: Path) -> None:
    series = [
        ParitySeries("TTFT ms", (10.0, 20.0, 30.0), (11.0, 19.0, 33.0), (False, False, True)),
        ParitySeries("out tok/s", (500.0,), (480.0,), (False,)),
        ParitySeries("ITL ms", (), (), ()),
    ]
    path = write_calibration_parity(series, tmp_path / "parity.png", "a title")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > image.size[1] > 300
    empty = write_calibration_parity([ParitySeries("ITL ms", (), (), ())], tmp_path / "empty.png")
    assert empty.stat().st_size > 0


def test_the_report_ends_with_notes_on_rows_the_model_cannot_run_as_measured_and_has_none_without_them() -> None:
    calibration = calibration_of([{"ttft_s": 0.010}], [{"ttft_s": 0.011}], train=(0,))
    assert "notes:" not in format_report(calibration, "title")
    noted = dataclasses.replace(
        calibration, setup=dataclasses.replace(calibration.setup, notes=("data.csv:2: a batch",))
    )
    assert format_report(noted, "title").endswith("\n\nnotes:\n- data.csv:2: a batch")
