"""Fit profile parameters to measured settings, and score the fit on rows it did not see.

The fit minimises the sum of squared ``log(predicted / measured)`` over every measured mean of the
training rows (a 10% miss on a 10 ms TTFT counts as much as on a 5,000 tok/s throughput; a p99 from a
benchmark tool's file is predicted and scored, not fitted) with scipy's bounded least squares
(trust-region reflective, finite differences), from the base profile's values: deterministic, with no
random restarts. Each prediction is a simulation (:mod:`.simulate`); a run is never repeated for the
same row and values.

Scores: in-sample (the fit's own rows), leave-one-out (each training row predicted by the same fit,
from the base values, on the other training rows: nothing of the left-out row reaches its prediction)
and held out (rows outside the training set, when one is chosen).
The fitted values are rounded to 4 significant digits, as they are written, before anything is scored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from clustersim.calibration.measurements import Measurement, MeasurementFile, catalogue_next_to, fitted_values
from clustersim.calibration.parameters import FitParameter, resolve_parameters, with_values
from clustersim.calibration.simulate import (
    DEFAULT_NUM_REQUESTS,
    Prediction,
    RowProfiles,
    batch_kv_note,
    predict,
    row_scenario,
)
from clustersim.config.loader import LoadedScenario
from clustersim.config.profiles import EngineProfile, HardwareProfile, ModelProfile
from clustersim.errors import ClusterSimError, ConfigError

DIFF_STEP = 0.02  # finite-difference step, in scaled units: wider than the jumps a queue's discrete batching makes
X_TOL = 1e-3  # relative change of the scaled parameters: well below the errors that matter
F_TOL = 1e-4
SIGNIFICANT_DIGITS = 4
BOUND_SNAP = X_TOL  # scaled distance from a bound at which a fitted value is taken to be on it

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Setup:
    """Everything a fit evaluates: the rows, their scenarios, the base profiles and what is fitted.

    ``hardware`` and ``models`` are keyed by the names the rows use.
    """

    rows: tuple[Measurement, ...]
    scenarios: tuple[LoadedScenario, ...]
    engine: EngineProfile
    hardware: Mapping[str, HardwareProfile]
    models: Mapping[str, ModelProfile]
    parameters: tuple[FitParameter, ...]
    notes: tuple[str, ...] = ()  # what the report says about rows the model cannot run as measured


def _first_files(rows: Sequence[Measurement], paths: Sequence[Path], kind: str) -> dict[str, Path]:
    """Each ``hardware`` or ``model`` name of the rows, with the file of the first row that names it."""
    found: dict[str, Path] = {}
    for row, path in zip(rows, paths, strict=True):
        found.setdefault(getattr(row, kind), path)
    return found


def prepare(
    measurements: MeasurementFile,
    engine: EngineProfile,
    fields: Sequence[str],
    train: Sequence[int],
    overrides: Sequence[str] = (),
    num_requests: int = DEFAULT_NUM_REQUESTS,
) -> Setup:
    """Look up the rows' profiles (their names were checked when read; a profile file resolves next
    to the first file that names it), build their scenarios and the parameters of ``fields``.

    GPU fields get one parameter per GPU of the training rows (a GPU seen only in held-out rows
    keeps its catalogue values).
    """
    rows = measurements.rows
    paths = [row.path or measurements.path for row in rows]
    gpu_files, model_files = _first_files(rows, paths, "hardware"), _first_files(rows, paths, "model")
    hardware = {name: catalogue_next_to(gpu_files[name]).hardware(name) for name in sorted(gpu_files)}
    models = {name: catalogue_next_to(model_files[name]).model(name) for name in sorted(model_files)}
    scenarios = tuple(
        row_scenario(row, engine.name, path, overrides, num_requests) for row, path in zip(rows, paths, strict=True)
    )
    trained_gpus = {rows[i].hardware: hardware[rows[i].hardware] for i in train}
    parameters = resolve_parameters(fields, engine, trained_gpus)
    notes = (
        batch_kv_note(row, scenario, RowProfiles(hardware[row.hardware], models[row.model], engine))
        for row, scenario in zip(rows, scenarios, strict=True)
    )
    return Setup(rows, scenarios, engine, hardware, models, parameters, tuple(n for n in notes if n))


class Evaluator:
    """Predictions of the rows for parameter values; each (row, values) is simulated once."""

    def __init__(self, setup: Setup, scratch_dir: Path) -> None:
        self.setup = setup
        self.scratch_dir = scratch_dir
        self.num_simulations = 0
        self._memo: dict[tuple[int, tuple[float, ...]], Prediction] = {}

    def predict(self, index: int, values: Sequence[float]) -> Prediction:
        """Row ``index`` simulated with the parameters at ``values`` (their own units)."""
        key = (index, tuple(float(v) for v in values))
        if key not in self._memo:
            setup = self.setup
            engine, hardware = with_values(setup.parameters, values, setup.engine, setup.hardware)
            row = setup.rows[index]
            profiles = RowProfiles(hardware[row.hardware], setup.models[row.model], engine)
            self._memo[key] = predict(setup.scenarios[index], profiles, self.scratch_dir)
            self.num_simulations += 1
        return self._memo[key]

    def residuals(self, indices: Sequence[int], values: Sequence[float]) -> Array:
        """``log(predicted / measured)`` of every fitted measured value (means, not p99s) of the rows ``indices``."""
        residuals = []
        for index in indices:
            predicted = self.predict(index, values)
            for metric, measured in fitted_values(self.setup.rows[index]).items():
                value = predicted[metric]
                if value is None or not value > 0:
                    raise ClusterSimError(f"{self.setup.scenarios[index].source}: the simulation gave no {metric}")
                residuals.append(math.log(value / measured))
        return np.asarray(residuals, dtype=np.float64)


def fit(evaluator: Evaluator, indices: Sequence[int]) -> tuple[float, ...]:
    """The parameter values (own units) that best fit the rows ``indices``, from the base values.

    A GPU's parameters are fitted only when one of the rows runs on that GPU; otherwise they keep
    their base values (nothing in the rows says anything about them).
    """
    setup = evaluator.setup
    gpus = {setup.rows[i].hardware for i in indices}
    start = np.array([p.start for p in setup.parameters])
    free = np.array([p.hardware is None or p.hardware in gpus for p in setup.parameters])
    if not free.any():
        return tuple(float(v) for v in start)
    scale = np.array([p.scale for p in setup.parameters])[free]
    low = np.array([p.low for p in setup.parameters])[free] / scale
    high = np.array([p.high for p in setup.parameters])[free] / scale

    def values_of(x: Array) -> tuple[float, ...]:
        values = start.copy()
        values[free] = x * scale
        return tuple(float(v) for v in values)

    def residuals(x: Array) -> Array:
        return evaluator.residuals(indices, values_of(x))

    x0 = np.clip(start[free] / scale, low, high)
    result = least_squares(residuals, x0, bounds=(low, high), diff_step=DIFF_STEP, xtol=X_TOL, ftol=F_TOL)
    x = np.asarray(result.x, dtype=np.float64)
    x = np.where(x - low < BOUND_SNAP, low, np.where(high - x < BOUND_SNAP, high, x))  # the solver stops just inside
    return values_of(x)


def rounded(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``value`` to ``digits`` significant digits (as the profile file shows it)."""
    return float(f"{value:.{digits}g}")


def choose_training_rows(
    num_rows: int, train_rows: Sequence[int] | None, train_frac: float | None, seed: int
) -> tuple[int, ...]:
    """The rows to fit on: all of them, the given ones (0-based), or a seeded random fraction."""
    if train_rows is not None and train_frac is not None:
        raise ConfigError("--train-rows", "", "give --train-rows or --train-frac, not both")
    if train_rows is not None:
        for index in train_rows:
            if not 0 <= index < num_rows:
                raise ConfigError("--train-rows", str(index), f"no such row: the file has rows 0 to {num_rows - 1}")
        if len(set(train_rows)) != len(train_rows):
            raise ConfigError("--train-rows", "", "a row is named twice")
        if not train_rows:
            raise ConfigError("--train-rows", "", "name at least one row")
        return tuple(sorted(train_rows))
    if train_frac is not None:
        if not 0 < train_frac <= 1:
            raise ConfigError("--train-frac", "", f"{train_frac:g} must be in (0, 1]")
        count = min(num_rows, max(1, round(train_frac * num_rows)))
        return tuple(sorted(int(i) for i in np.random.default_rng(seed).permutation(num_rows)[:count]))
    return tuple(range(num_rows))


@dataclass(frozen=True)
class Calibration:
    """A fit and its scores.

    ``values`` are the fitted parameters (rounded as written); ``predictions`` every row's
    prediction with them, ``baseline`` with the base profiles' values; ``leave_one_out`` each
    training row's prediction by a fit without it (absent when it was the only training row).
    """

    setup: Setup
    train: tuple[int, ...]
    values: tuple[float, ...]
    predictions: dict[int, Prediction]
    baseline: dict[int, Prediction]
    leave_one_out: dict[int, Prediction]
    num_simulations: int

    @property
    def test(self) -> tuple[int, ...]:
        """The rows outside the training set (scored as held out)."""
        return tuple(i for i in range(len(self.setup.rows)) if i not in self.train)


def calibrate(setup: Setup, train: Sequence[int], scratch_dir: Path) -> Calibration:
    """Fit on the rows ``train``, then predict every row, and each training row by the same fit
    (from the base values) on the other training rows."""
    evaluator = Evaluator(setup, scratch_dir)
    values = tuple(rounded(v) for v in fit(evaluator, train))
    predictions = {i: evaluator.predict(i, values) for i in range(len(setup.rows))}
    start = [p.start for p in setup.parameters]
    baseline = {i: evaluator.predict(i, start) for i in range(len(setup.rows))}
    leave_one_out = {}
    for left_out in train:
        others = [i for i in train if i != left_out]
        if others:
            leave_one_out[left_out] = evaluator.predict(left_out, fit(evaluator, others))
    return Calibration(setup, tuple(train), values, predictions, baseline, leave_one_out, evaluator.num_simulations)
