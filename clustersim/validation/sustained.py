"""Rates held under continuous load (``scripts/measure_kernels.py sustained``, ``validation/kernels/sustained``).

The script runs one phase after another (Llama-3.1-70B's four GEMMs at 4,096 tokens in BF16, then in
FP8, then decode attention) back to back for ``--seconds`` each and writes the work done per window of
about 0.25 s. A GPU reaches its board power limit within a second and lowers its clock to stay there, so a
phase's first windows run faster than the rest: the median after :data:`SETTLED_AFTER_S` is the rate a busy
engine holds (the hardware profiles' ``sustained_*_flops_per_s``), the median of the first
:data:`FIRST_S` what a short timed burst sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from clustersim.errors import ConfigError
from clustersim.validation.kernels import measured_gpu

FIRST_S = 2.0  # a phase's opening windows: what a short burst sees
SETTLED_AFTER_S = 10.0  # from here on, the rate the power limit holds
COLUMNS = ("phase", "t_s", "work_per_s")


@dataclass(frozen=True)
class SustainedRate:
    """One phase of one GPU's run: its median rate at first and once settled (FLOP/s or bytes/s)."""

    gpu: str
    phase: str
    first_per_s: float
    settled_per_s: float


def sustained_rates(path: Path, gpu: str) -> list[SustainedRate]:
    """Each phase of the table at ``path``, in the order it ran."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), "", f"cannot read the sustained-load table: {exc}") from exc
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(str(path), missing[0], "missing column (expected phase, t_s, work_per_s)")
    rates = []
    for phase, rows in frame.groupby("phase", sort=False):
        since = rows["t_s"] - rows["t_s"].min()
        settled = rows.loc[since >= SETTLED_AFTER_S, "work_per_s"]
        if settled.empty:
            raise ConfigError(str(path), "t_s", f"phase {phase} ran under {SETTLED_AFTER_S:g} s: nothing settled")
        first = rows.loc[since < FIRST_S, "work_per_s"].median()
        rates.append(SustainedRate(gpu, str(phase), float(first), float(settled.median())))
    return rates


def load_sustained(kernels_dir: Path) -> list[SustainedRate]:
    """Every table in ``kernels_dir/sustained`` named after a measured GPU table (``h100-sxm.csv`` beside
    ``../h100-sxm.environment.json``); none where the folder is absent."""
    folder = kernels_dir / "sustained"
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.csv")):
        if path.name.endswith("-nvidia-smi.csv"):
            continue
        found.extend(sustained_rates(path, measured_gpu(kernels_dir / path.name)))
    return found


def format_sustained(rates: list[SustainedRate]) -> str:
    """The table ``validate-cost --kernels`` prints: each phase's rate at first, settled, and their ratio."""
    lines = [
        f"under continuous load (median of the first {FIRST_S:g} s, and after {SETTLED_AFTER_S:g} s; "
        "GEMMs in TFLOP/s, decode attention in TB/s):",
        f"{'GPU':<10} {'phase':<12} {'first':>8} {'settled':>8} {'ratio':>6}",
    ]
    for r in rates:
        lines.append(
            f"{r.gpu:<10} {r.phase:<12} {r.first_per_s / 1e12:>8.1f} {r.settled_per_s / 1e12:>8.1f} "
            f"{r.settled_per_s / r.first_per_s:>6.3f}"
        )
    return "\n".join(lines)
