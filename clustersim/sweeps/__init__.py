"""Many runs of one scenario: sweeps over any fields and seeds, their tables and statistics."""

from clustersim.sweeps.execute import SweepResult, resolve_base, run_sweep
from clustersim.sweeps.points import Point, expand
from clustersim.sweeps.spec import Axis, SweepSpec, ZipAxes, load_sweep, sweep_from_mapping

__all__ = [
    "Axis",
    "Point",
    "SweepResult",
    "SweepSpec",
    "ZipAxes",
    "expand",
    "load_sweep",
    "resolve_base",
    "run_sweep",
    "sweep_from_mapping",
]
