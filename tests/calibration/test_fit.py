"""The fit: choosing training rows, leave-one-out arithmetic, and recovering known parameters."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clustersim.calibration import fit as fit_module
from clustersim.calibration.fit import Evaluator, calibrate, choose_training_rows, fit, prepare, rounded
from clustersim.calibration.measurements import COLUMNS, METRICS, read_measurements
from clustersim.calibration.report import Scores, error_pct, scores
from clustersim.calibration.simulate import Prediction, RowProfiles, predict, row_scenario
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario
from clustersim.config.profiles import Cited
from clustersim.errors import ConfigError

CATALOGUE = Catalogue.builtin()
VLLM = CATALOGUE.engine("vllm-v0.6")


def write_csv(path: Path, rows: list[list[object]]) -> Path:
    path.write_text(",".join(COLUMNS) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- training rows
def test_training_rows_all_given_or_a_seeded_fraction() -> None:
    assert choose_training_rows(5, None, None, 0) == (0, 1, 2, 3, 4)
    assert choose_training_rows(5, [3, 0], None, 0) == (0, 3)
    third = choose_training_rows(12, None, 0.33, 7)
    assert len(third) == 4 and third == choose_training_rows(12, None, 0.33, 7)  # same seed, same rows
    assert choose_training_rows(3, None, 0.01, 0) in ((0,), (1,), (2,))  # at least one row
    assert choose_training_rows(3, None, 1.0, 0) == (0, 1, 2)


@pytest.mark.parametrize(
    ("rows", "frac", "source", "words"),
    [
        ([5], None, "--train-rows", "no such row: the file has rows 0 to 4"),
        ([-1], None, "--train-rows", "no such row"),
        ([1, 1], None, "--train-rows", "named twice"),
        ([], None, "--train-rows", "at least one row"),
        ([1], 0.5, "--train-rows", "not both"),
        (None, 0.0, "--train-frac", "must be in (0, 1]"),
        (None, 1.5, "--train-frac", "must be in (0, 1]"),
    ],
)
def test_training_rows_refused(rows: list[int] | None, frac: float | None, source: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        choose_training_rows(5, rows, frac, 0)
    assert caught.value.source == source and words in str(caught.value)


# ----------------------------------------------------------------------------- leave-one-out arithmetic
# A stand-in for the simulator: row i's TTFT is k_i x step_overhead_s, with k_i its line number. Then
# the least-squares fit of log(k_i s / m_i) is the geometric mean of s_i = m_i / k_i, exactly.
TRUE_S = {2: 1e-3, 3: 2e-3, 4: 4e-3, 5: 8e-3}  # line -> the overhead that row's measurement implies


def proportional(loaded: LoadedScenario, profiles: RowProfiles, scratch_dir: Path) -> Prediction:
    line = int(loaded.source.rsplit(":", 1)[1])
    return {"ttft_s": line * profiles.engine.step_overhead_s.value, "itl_s": None, "output_tokens_per_s": None}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


@pytest.fixture(name="proportional_setup")
def proportional_setup_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> fit_module.Setup:
    monkeypatch.setattr(fit_module, "predict", proportional)
    rows = [["H100-SXM", "Llama-3.1-8B", 1, "", "batch", 1, 16, 1, line * s, "", ""] for line, s in TRUE_S.items()]
    data = read_measurements(write_csv(tmp_path / "data.csv", rows))
    return prepare(data, VLLM, ["step_overhead_s"], range(4))


def test_leave_one_out_refits_without_the_row(proportional_setup: fit_module.Setup, tmp_path: Path) -> None:
    result = calibrate(proportional_setup, [0, 1, 2, 3], tmp_path)
    assert result.values == (rounded(geomean(list(TRUE_S.values()))),)
    for index, (line, s) in enumerate(TRUE_S.items()):
        others = geomean([v for k, v in TRUE_S.items() if k != line])
        assert result.leave_one_out[index]["ttft_s"] == pytest.approx(line * others, rel=1e-3)
        assert result.predictions[index]["ttft_s"] == pytest.approx(line * result.values[0])
        assert result.baseline[index]["ttft_s"] == pytest.approx(line * 1.15e-3)
        assert error_pct(line * s, result.leave_one_out[index]["ttft_s"]) == pytest.approx(
            100 * (others / s - 1), rel=1e-3
        )
    loo = scores(result)["leave-one-out"]
    expected = [abs(100 * (geomean([v for k, v in TRUE_S.items() if k != line]) / s - 1)) for line, s in TRUE_S.items()]
    assert loo.mape("ttft_s") == pytest.approx(sum(expected) / 4, rel=1e-3)
    assert loo.mape() == loo.mape("ttft_s") and loo.count() == 4 and scores(result)["held out"].mape() is None


def test_held_out_rows_are_scored_by_the_fit_on_the_others(
    proportional_setup: fit_module.Setup, tmp_path: Path
) -> None:
    result = calibrate(proportional_setup, [0, 3], tmp_path)
    assert result.test == (1, 2)
    assert result.values[0] == pytest.approx(geomean([TRUE_S[2], TRUE_S[5]]), rel=1e-3)
    held = scores(result)["held out"]
    expected = [abs(100 * (result.values[0] / TRUE_S[line] - 1)) for line in (3, 4)]
    assert held.mape() == pytest.approx(sum(expected) / 2) and held.count("itl_s") == 0


def test_one_training_row_has_no_leave_one_out(proportional_setup: fit_module.Setup, tmp_path: Path) -> None:
    result = calibrate(proportional_setup, [2], tmp_path)
    assert result.leave_one_out == {} and result.values[0] == pytest.approx(TRUE_S[4], rel=1e-3)


def by_efficiency(loaded: LoadedScenario, profiles: RowProfiles, scratch_dir: Path) -> Prediction:
    line = int(loaded.source.rsplit(":", 1)[1])
    ttft_s = line * profiles.engine.step_overhead_s.value / profiles.hardware.compute_efficiency_frac.value
    return {"ttft_s": ttft_s, "itl_s": None, "output_tokens_per_s": None}


def test_a_gpu_without_rows_keeps_its_base_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fit_module, "predict", by_efficiency)
    rows = [[gpu, "Llama-3.1-8B", 1, "", "batch", 1, 16, 1, 0.01, "", ""] for gpu in ("H100-SXM", "H100-SXM", "H200")]
    data = read_measurements(write_csv(tmp_path / "data.csv", rows))
    setup = prepare(data, VLLM, ["step_overhead_s", "compute_efficiency_frac"], range(3))
    assert [p.label for p in setup.parameters] == [
        "step_overhead_s",
        "H100-SXM.compute_efficiency_frac",
        "H200.compute_efficiency_frac",
    ]
    without_h200 = fit(Evaluator(setup, tmp_path), [0, 1])
    assert without_h200[2] == setup.parameters[2].start and without_h200[1] != setup.parameters[1].start
    result = calibrate(setup, [0, 1, 2], tmp_path)  # row 2 (line 4) left out: the fit above, H200 at its base
    assert result.leave_one_out[2]["ttft_s"] == pytest.approx(4 * without_h200[0] / setup.parameters[2].start)


def test_scores_average_absolute_errors_per_metric() -> None:
    by_metric = {metric: [] for metric in METRICS}
    by_metric["ttft_s"] += [10.0, 30.0]
    by_metric["itl_s"] += [5.0]
    table = Scores(by_metric)
    assert (table.mape("ttft_s"), table.mape("itl_s"), table.mape("output_tokens_per_s")) == (20.0, 5.0, None)
    assert table.mape() == pytest.approx(15.0) and table.count() == 3


def test_each_row_and_values_is_simulated_once(proportional_setup: fit_module.Setup, tmp_path: Path) -> None:
    evaluator = Evaluator(proportional_setup, tmp_path)
    evaluator.residuals([0, 1], [1e-3])
    evaluator.residuals([0, 1, 2], [1e-3])
    assert evaluator.num_simulations == 3


# ----------------------------------------------------------------------------- recovering known values
def test_fit_recovers_the_overheads_that_made_the_data(tmp_path: Path) -> None:
    """Measurements simulated with step_overhead_s = 2 ms and per_seq_overhead_s = 50 us; the fit starts
    from vllm's 1.15 ms and 30 us and finds them again."""
    truth = VLLM.model_copy(
        update={
            "step_overhead_s": Cited[float](value=2e-3, source="the test's truth"),
            "per_seq_overhead_s": Cited[float](value=50e-6, source="the test's truth"),
        }
    )
    settings = [["batch", 1, 128, 8], ["batch", 32, 64, 16], ["concurrency", 8, 256, 8]]
    blank = write_csv(tmp_path / "blank.csv", [["H100-SXM", "Llama-3.1-8B", 1, "", *s, 1, 1, 1] for s in settings])
    measured_rows = []
    for setting, measurement in zip(settings, read_measurements(blank).rows, strict=True):
        profiles = RowProfiles(CATALOGUE.hardware("H100-SXM"), CATALOGUE.model("Llama-3.1-8B"), truth)
        figures = predict(row_scenario(measurement, "vllm-v0.6", blank), profiles, tmp_path / "truth")
        measured_rows.append(["H100-SXM", "Llama-3.1-8B", 1, "", *setting, *(repr(figures[m]) for m in METRICS)])
    data = read_measurements(write_csv(tmp_path / "data.csv", measured_rows))
    result = calibrate(
        prepare(data, VLLM, ["step_overhead_s", "per_seq_overhead_s"], range(3)), range(3), tmp_path / "s"
    )
    step_s, per_seq_s = result.values
    assert step_s == pytest.approx(2e-3, rel=0.01) and per_seq_s == pytest.approx(50e-6, rel=0.02)
    assert scores(result)["in-sample"].mape() < 0.2 and scores(result)["leave-one-out"].mape() < 1.0
    assert scores(result)["base (fit rows)"].mape() > 5.0
