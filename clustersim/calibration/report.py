"""A calibration's errors, as numbers and as the text ``clustersim calibrate`` prints.

Errors are signed percentages, ``100 (predicted - measured) / measured``; a MAPE is the mean of their
absolute values over (row, metric) pairs: in-sample (the fit's rows with the fitted values),
leave-one-out (each training row by the fit without it) and held out (the rows outside the
training set).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clustersim.calibration.fit import Calibration
from clustersim.calibration.measurements import METRICS, Metric
from clustersim.calibration.simulate import Prediction

LABELS: dict[Metric, tuple[str, float, str]] = {  # label, scale from the metric's unit, format
    "ttft_s": ("TTFT ms", 1e3, ".2f"),
    "itl_s": ("ITL ms", 1e3, ".2f"),
    "output_tokens_per_s": ("out tok/s", 1.0, ".1f"),
}


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
        by_metric: dict[Metric, list[float]] = {metric: [] for metric in METRICS}
        for index in rows:
            if index not in predictions:
                continue
            for metric, measured in calibration.setup.rows[index].measured.items():
                error = error_pct(measured, predictions[index][metric])
                if error is not None:
                    by_metric[metric].append(abs(error))
        return cls(by_metric)

    def mape(self, metric: Metric | None = None) -> float | None:
        """Mean absolute percentage error of one metric, or of every value (None: nothing scored)."""
        errors = self.by_metric[metric] if metric else [e for v in self.by_metric.values() for e in v]
        return sum(errors) / len(errors) if errors else None

    def count(self, metric: Metric | None = None) -> int:
        return len(self.by_metric[metric]) if metric else sum(len(v) for v in self.by_metric.values())


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


def format_rows(calibration: Calibration) -> str:
    """Per row and measured metric: measured, predicted by the base profile, by the fit, and by the
    fit without the row (training rows only)."""
    lines = [
        f"{'row':>3} {'line':>4} {'role':<4} {'setting':<62} {'metric':<9} {'measured':>9} "
        f"{'base':>9} {'error':>7} {'fitted':>9} {'error':>7} {'loo':>9} {'error':>7}"
    ]
    for index, row in enumerate(calibration.setup.rows):
        role = "fit" if index in calibration.train else "test"
        loo = calibration.leave_one_out.get(index)
        for metric, measured in row.measured.items():
            base = _compared(metric, measured, calibration.baseline[index][metric])
            fitted = _compared(metric, measured, calibration.predictions[index][metric])
            left_out = _compared(metric, measured, loo[metric] if loo is not None else None)
            lines.append(
                f"{index:>3} {row.line:>4} {role:<4} {row.setting():<62.62} {LABELS[metric][0]:<9} "
                f"{_value(metric, measured):>9} {base} {fitted} {left_out}"
            )
    return "\n".join(lines)


def format_scores(calibration: Calibration) -> str:
    """MAPE per metric and overall, by the base profile and by the fit (with the values counted)."""
    table = scores(calibration)
    header = f"{'MAPE':<10}" + "".join(f"{name:>18}" for name in table)
    lines = [header]
    for metric in (*METRICS, None):
        label = LABELS[metric][0] if metric else "overall"
        if metric and not any(s.count(metric) for s in table.values()):
            continue
        cells = []
        for score in table.values():
            mape = score.mape(metric)
            cells.append("-" if mape is None else f"{mape:.1f}% ({score.count(metric)})")
        lines.append(f"{label:<10}" + "".join(f"{cell:>18}" for cell in cells))
    return "\n".join(lines)


def format_report(calibration: Calibration, title: str) -> str:
    """The whole printout: title, parameters, rows, scores."""
    train, test = calibration.train, calibration.test
    fitted_on = f"fitted on {len(train)} of {len(calibration.setup.rows)} rows"
    if test:
        fitted_on += f" ({', '.join(map(str, train))}); the other {len(test)} are held out ('test')"
    return "\n\n".join(
        (
            f"{title}\n{fitted_on}; 'base' predicts with the base profiles, 'loo' a fit row by a fit without it",
            format_parameters(calibration),
            format_rows(calibration),
            format_scores(calibration) + "\n(MAPE: mean absolute percentage error over the values counted)",
        )
    )
