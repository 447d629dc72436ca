"""A calibration's errors, as numbers and as the text ``clustersim calibrate`` prints.

Errors are signed percentages, ``100 (predicted - measured) / measured``; a MAPE is the mean of their
absolute values over (row, metric) pairs: in-sample (the fit's rows with the fitted values),
leave-one-out (each training row by the fit without it) and held out (the rows outside the
training set). "overall" is over the means (TTFT, ITL, throughput), which the fit minimises; the
p99s of a benchmark tool's file are scored on their own lines. Pearson's r of a metric is over every
row that measured it, predicted with the fitted values (fit and held-out rows together), on the
values themselves; with fewer than 3 values it is not given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from clustersim.calibration.fit import Calibration
from clustersim.calibration.measurements import ALL_METRICS, METRICS, Metric
from clustersim.calibration.simulate import Prediction

LABELS: dict[Metric, tuple[str, float, str]] = {  # label, scale from the metric's unit, format
    "ttft_s": ("TTFT ms", 1e3, ".2f"),
    "itl_s": ("ITL ms", 1e3, ".2f"),
    "output_tokens_per_s": ("out tok/s", 1.0, ".1f"),
    "ttft_p99_s": ("TTFT p99", 1e3, ".2f"),
    "itl_p99_s": ("ITL p99", 1e3, ".2f"),
}
MIN_CORRELATION_VALUES = 3
MAX_FILE_CHARS = 24


def error_pct(measured: float, predicted: float | None) -> float | None:
    """Signed percentage error (positive: the model over-predicts); None without a prediction."""
    return None if predicted is None else 100.0 * (predicted - measured) / measured


@dataclass(frozen=True)
class Scores:
    """Absolute percentage errors by metric, for one way of scoring (in-sample, leave-one-out, held out)."""

    by_metric: dict[Metric, list[float]]

    @classmethod
    def of(cls, calibration: Calibration, rows: Sequence[int], predictions: Mapping[int, Prediction]) -> Scores:
        """The errors of ``predictions`` for the rows ``rows`` that have one."""
        by_metric: dict[Metric, list[float]] = {metric: [] for metric in ALL_METRICS}
        for index in rows:
            if index not in predictions:
                continue
            for metric, measured in calibration.setup.rows[index].measured.items():
                error = error_pct(measured, predictions[index].get(metric))
                if error is not None:
                    by_metric[metric].append(abs(error))
        return cls(by_metric)

    def mape(self, metric: Metric | None = None) -> float | None:
        """Mean absolute percentage error of one metric, or of every fitted value: the means, not the
        p99s (None: nothing scored)."""
        errors = self.by_metric[metric] if metric else [e for m in METRICS for e in self.by_metric[m]]
        return sum(errors) / len(errors) if errors else None

    def count(self, metric: Metric | None = None) -> int:
        """How many values :meth:`mape` averages."""
        return len(self.by_metric[metric]) if metric else sum(len(self.by_metric[m]) for m in METRICS)


def scores(calibration: Calibration) -> dict[str, Scores]:
    """The base profile's and the fit's errors: on the training rows (the fit's in-sample and
    leave-one-out) and on the held-out rows (empty when every row was fitted)."""
    train, test = calibration.train, calibration.test
    return {
        "base (fit rows)": Scores.of(calibration, train, calibration.baseline),
        "in-sample": Scores.of(calibration, train, calibration.predictions),
        "leave-one-out": Scores.of(calibration, train, calibration.leave_one_out),
        "base (test rows)": Scores.of(calibration, test, calibration.baseline),
        "held out": Scores.of(calibration, test, calibration.predictions),
    }


def fitted_pairs(calibration: Calibration) -> dict[Metric, list[tuple[float, float, bool]]]:
    """Per metric, (measured, predicted with the fitted values, whether the row was held out) of every
    row that measured it and has a prediction."""
    pairs: dict[Metric, list[tuple[float, float, bool]]] = {metric: [] for metric in ALL_METRICS}
    for index, row in enumerate(calibration.setup.rows):
        for metric, measured in row.measured.items():
            predicted = calibration.predictions[index].get(metric)
            if predicted is not None:
                pairs[metric].append((measured, predicted, index not in calibration.train))
    return pairs


def pearson_r(measured: Sequence[float], predicted: Sequence[float]) -> float | None:
    """Pearson's correlation of the pairs; None with fewer than 3, or when either side is constant."""
    if len(measured) < MIN_CORRELATION_VALUES:
        return None
    x, y = np.asarray(measured, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _value(metric: Metric, value: float | None) -> str:
    _, scale, fmt = LABELS[metric]
    return "-" if value is None else f"{value * scale:{fmt}}"


def format_parameters(calibration: Calibration) -> str:
    """The fitted parameters: start and fitted value."""
    lines = [f"{'parameter':<40} {'start':>11} {'fitted':>11}"]
    for parameter, value in zip(calibration.setup.parameters, calibration.values, strict=True):
        lines.append(f"{parameter.label:<40} {parameter.start:>11.4g} {value:>11.4g}")
    return "\n".join(lines)


def _compared(metric: Metric, measured: float, predicted: float | None) -> str:
    return f"{_value(metric, predicted):>9} {_pct(error_pct(measured, predicted)):>7}"


def _file_names(calibration: Calibration) -> list[str] | None:
    """Each row's file name when the rows come from several files (None: one file)."""
    names = [row.path.name if row.path is not None else "" for row in calibration.setup.rows]
    return names if len(set(names)) > 1 else None


def format_rows(calibration: Calibration) -> str:
    """Per row and measured metric: measured, predicted by the base profile, by the fit, and by the
    fit without the row (training rows only). ``line``: the CSV line or the benchmark's number in a
    JSON file, whose name is shown when the rows come from several files."""
    files = _file_names(calibration)
    file_head = f" {'file':<{MAX_FILE_CHARS}}" if files else ""
    lines = [
        f"{'row':>3} {'line':>4}{file_head} {'role':<4} {'setting':<62} {'metric':<9} {'measured':>9} "
        f"{'base':>9} {'error':>7} {'fitted':>9} {'error':>7} {'loo':>9} {'error':>7}"
    ]
    for index, row in enumerate(calibration.setup.rows):
        role = "fit" if index in calibration.train else "test"
        loo = calibration.leave_one_out.get(index)
        file_cell = f" {files[index]:<{MAX_FILE_CHARS}.{MAX_FILE_CHARS}}" if files else ""
        for metric, measured in row.measured.items():
            base = _compared(metric, measured, calibration.baseline[index].get(metric))
            fitted = _compared(metric, measured, calibration.predictions[index].get(metric))
            left_out = _compared(metric, measured, loo.get(metric) if loo is not None else None)
            lines.append(
                f"{index:>3} {row.line:>4}{file_cell} {role:<4} {row.setting():<62.62} {LABELS[metric][0]:<9} "
                f"{_value(metric, measured):>9} {base} {fitted} {left_out}"
            )
    return "\n".join(lines)


def _correlation_cell(pairs: list[tuple[float, float, bool]]) -> str:
    r = pearson_r([p[0] for p in pairs], [p[1] for p in pairs])
    return "-" if r is None else f"{r:+.3f} ({len(pairs)})"


def format_scores(calibration: Calibration) -> str:
    """MAPE per metric and overall, by the base profile and by the fit (with the values counted), and
    Pearson's r of each metric's fitted predictions over every row."""
    table = scores(calibration)
    pairs = fitted_pairs(calibration)
    header = f"{'MAPE':<10}" + "".join(f"{name:>18}" for name in table) + f"{'r (fitted)':>14}"
    lines = [header]
    for metric in (*ALL_METRICS, None):
        label = LABELS[metric][0] if metric else "overall"
        if metric and not any(s.count(metric) for s in table.values()):
            continue
        cells = []
        for score in table.values():
            mape = score.mape(metric)
            cells.append("-" if mape is None else f"{mape:.1f}% ({score.count(metric)})")
        correlation = _correlation_cell(pairs[metric]) if metric else "-"
        lines.append(f"{label:<10}" + "".join(f"{cell:>18}" for cell in cells) + f"{correlation:>14}")
    return "\n".join(lines)


def format_report(calibration: Calibration, title: str) -> str:
    """The whole printout: title, parameters, rows, scores and notes on rows the model cannot run as measured."""
    train, test = calibration.train, calibration.test
    notes = calibration.setup.notes
    noted = ["notes:\n" + "\n".join(f"- {note}" for note in notes)] if notes else []
    fitted_on = f"fitted on {len(train)} of {len(calibration.setup.rows)} rows"
    if test:
        fitted_on += f" ({', '.join(map(str, train))}); the other {len(test)} are held out ('test')"
    return "\n\n".join(
        (
            f"{title}\n{fitted_on}; 'base' predicts with the base profiles, 'loo' a fit row by a fit without it",
            format_parameters(calibration),
            format_rows(calibration),
            format_scores(calibration)
            + "\n(MAPE: mean absolute percentage error over the values counted; 'overall': the means, which the fit"
            + " minimises, not the p99s; r: Pearson's correlation of the fitted predictions with the measurements"
            + " over every row, '-' with fewer than 3 values)",
            *noted,
        )
    )
