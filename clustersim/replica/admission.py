"""SLO-aware admission: shed or defer waiting requests that can no longer meet their TTFT target (pure).

Before every plan, a waiting head that, admitted now, would get its first token after its tenant's
TTFT target (waited so far + its prefill alone on the replica) is shed (rejected with the reason)
or deferred (served when nothing else waits). Requests preempted after their first token are
never shed. The rule depends on the time, so a decode run ends at the first boundary where it
would act on the head: :meth:`SloAdmission.acts_on` is the one predicate both paths use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from clustersim.config.scenario import SloAdmissionMode
from clustersim.cost.base import CostModel, StepBatch
from clustersim.kvcache.sequence import prefill_tokens_of
from clustersim.workload.request import Request


def misses_ttft(request: Request, now_s: float, prefill_s: float, ttft_target_s: float) -> bool:
    """Whether a request admitted now would get its first token after its TTFT target."""
    return now_s - request.arrival_at_s + prefill_s > ttft_target_s


class SloAdmission:
    """The shed/defer rule of one replica (``mode`` off: it never acts)."""

    def __init__(self, mode: SloAdmissionMode, ttft_targets_s: Mapping[str, float], cost_model: CostModel) -> None:
        self.mode = mode
        self.active = mode != "off"
        self.ttft_targets_s = ttft_targets_s
        self._cost_model = cost_model
        self._prefill_s: dict[int, float] = {}

    def prefill_estimate_s(self, request: Request) -> float:
        """The request's prefill alone on the replica (memoised by length)."""
        tokens = prefill_tokens_of(request)
        estimate = self._prefill_s.get(tokens)
        if estimate is None:
            batch = StepBatch(prefill_new_tokens=(tokens,), prefill_context_tokens=(0,))
            estimate = self._prefill_s[tokens] = self._cost_model.step_duration_s(batch)
        return estimate

    def acts_on(self, request: Request, at_s: float) -> bool:
        """Whether a plan at ``at_s`` would shed or defer ``request`` if it were the waiting head."""
        if self.mode == "off" or request.num_emitted_tokens > 0:
            return False
        target = self.ttft_targets_s.get(request.tenant)
        return target is not None and misses_ttft(request, at_s, self.prefill_estimate_s(request), target)

    def shed_reason(self, request: Request) -> str:
        return f"shed: predicted TTFT above the {self.ttft_targets_s[request.tenant]:g} s target"

    def apply(self, head: Callable[[], Request | None], pop: Callable[[], Request], now_s: float) -> list[Request]:
        """Take the waiting heads the rule acts on at ``now_s``, in order (the caller sheds or defers them)."""
        taken: list[Request] = []
        while (request := head()) is not None and self.acts_on(request, now_s):
            taken.append(pop())
        return taken
