"""The base of every config model, and the latency targets (SLO) both tenants and scenarios carry."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat


class StrictModel(BaseModel):
    """Base for every config model: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# ----------------------------------------------------------------------------- SLO
class SLO(StrictModel):
    """Per-request targets; a request meets the SLO when it meets every target given.

    ``percentile`` (optional, in (0, 100)): also judge the run as a whole, as capacity planners
    state targets ("p99 TTFT under 500 ms"): is that percentile of each metric within its target?
    """

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None
    percentile: float | None = Field(default=None, gt=0.0, lt=100.0)

    def targets(self) -> dict[str, float]:
        """The latency targets that are set, by metric name."""
        return {k: v for k in ("ttft_s", "tpot_s", "e2e_s") if (v := getattr(self, k)) is not None}
