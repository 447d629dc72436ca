"""The base of every config model, and the latency targets (SLO) both tenants and scenarios carry."""

from __future__ import annotations

import sys
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

# Numbers must fit the arithmetic they enter: counts (tokens, blocks, requests, users) within 32-bit
# integers, so that sums over millions of requests fit 64 bits; byte sizes exact in a float; a seed
# within 64 bits; floats normal (a subnormal rate such as 1e-320 per second has an infinite mean gap)
# and at most 1e100; times (``*_s``) at most 1e9 s (31 years: a step of a millisecond still moves
# the clock there).
MAX_COUNT = 2**31 - 1
MAX_BYTES = 2**53
MAX_SEED = 2**63 - 1
MAX_FLOAT = 1e100
MAX_SECONDS = 1e9


class StrictModel(BaseModel):
    """Base for every config model: frozen, unknown keys rejected, floats finite. The loader also
    checks that numbers are within the magnitudes above and that ``true``/``false`` appear only
    where a field is a yes/no (:func:`clustersim.config.loader.validate_mapping`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def number_problem(value: Any, field_name: str = "") -> str | None:
    """What is wrong with a validated number for the arithmetic it enters (None: nothing): an
    integer beyond 2**31 - 1 (``*_bytes``: 2**53; a ``seed``: 2**63 - 1), a subnormal float, a
    float beyond 1e100 (``*_s``: 1e9 s, but not ``*_bytes_per_s``) in magnitude."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        limit = MAX_SEED if field_name == "seed" else MAX_BYTES if field_name.endswith("_bytes") else MAX_COUNT
        return f"{value:.3g} is too large (at most {limit:,})" if abs(value) > limit else None
    if isinstance(value, float):
        if value != 0 and abs(value) < sys.float_info.min:
            return f"{value:.3g} is too small to compute with (a subnormal float)"
        seconds = field_name.endswith("_s") and not field_name.endswith("_bytes_per_s")  # a bandwidth is no time
        limit_f = MAX_SECONDS if seconds else MAX_FLOAT
        if abs(value) > limit_f:
            return f"{value:.3g} is too large (at most {limit_f:.0e})"
    return None


def takes_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold ``true``/``false``."""
    if annotation is bool or annotation is Any:
        return True
    if get_origin(annotation) in (Union, types.UnionType) or get_origin(annotation) is Annotated:
        return any(takes_bool(arg) for arg in get_args(annotation))
    return False


# ----------------------------------------------------------------------------- SLO
class SLO(StrictModel):
    """Per-request targets; a request meets the SLO when it meets every target given.

    ``itl_s`` bounds every gap between two consecutive tokens of a request (its ``max_itl_s``).
    ``percentile`` (optional, in (0, 100)): also judge the run as a whole, as capacity planners
    state targets ("p99 TTFT under 500 ms"): is that percentile of each metric within its target?
    For ``itl_s`` the percentile is over all gaps of all requests (Sarathi-Serve's p99
    time-between-tokens), for the others over completed requests.
    """

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    itl_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None
    percentile: float | None = Field(default=None, gt=0.0, lt=100.0)

    def targets(self) -> dict[str, float]:
        """The latency targets that are set, by metric name."""
        return {k: v for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s") if (v := getattr(self, k)) is not None}
