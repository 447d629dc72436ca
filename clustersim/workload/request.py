"""The request entity and its lifecycle record."""

from __future__ import annotations

import math
from typing import Literal

from clustersim.shares import FULL_SHARE

RequestStatus = Literal["completed", "rejected", "unfinished", "lost"]
# a request's KV cache between a prefill and a decode replica (disaggregation): none to move; its
# prompt is done and it waits at the decode replica to be pulled; its KV cache has landed there
NO_REMOTE_KV, AWAITING_PULL, LANDED = 0, 1, 2
GapKey = tuple[str, bool]  # (tenant, measured): what a request's inter-token gaps are counted under


class Request:
    """One inference request, from arrival to its last token.

    Times are absolute simulation times in seconds (``*_at_s``); NaN until they happen.
    ``num_emitted_tokens`` counts output tokens produced so far (kept across preemptions);
    ``max_itl_s`` is its greatest inter-token gap (``-inf`` before its second token). ``gap_key``:
    ``(tenant, measured)``, whether the summary measures it (the scenario's ``metrics`` window; set
    on arrival, True without a window).

    From the arrival process: ``session_id`` (a session within the tenant: a closed-loop user, or a
    trace's session column; -1 if none) and ``prefix_hash_ids`` (ids of the prompt's leading blocks
    from a Mooncake trace: equal ids mean a shared prefix; empty if unknown). ``ids_cover_output``:
    the ids go on over the output's blocks too (a conversation turn, whose output the next turn's
    prompt repeats), so those blocks are cached when it finishes.
    """

    __slots__ = (
        "arrival_at_s",
        "decode_share",
        "finished_at_s",
        "first_scheduled_at_s",
        "first_token_at_s",
        "gap_key",
        "ids_cover_output",
        "last_token_at_s",
        "max_itl_s",
        "num_cached_prompt_tokens",
        "num_emitted_tokens",
        "num_preemptions",
        "num_retries",
        "output_tokens",
        "prefix_hash_ids",
        "prompt_tokens",
        "reject_reason",
        "remote_kv",
        "remote_kv_blocks",
        "replica",
        "request_id",
        "session_id",
        "status",
        "tenant",
    )

    def __init__(
        self,
        request_id: int,
        tenant: str,
        arrival_at_s: float,
        prompt_tokens: int,
        output_tokens: int,
        *,
        session_id: int = -1,
        prefix_hash_ids: tuple[int, ...] = (),
        ids_cover_output: bool = False,
    ) -> None:
        self.request_id = request_id
        self.tenant = tenant
        self.arrival_at_s = arrival_at_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.session_id = session_id
        self.prefix_hash_ids = prefix_hash_ids
        self.ids_cover_output = ids_cover_output
        self.replica = -1
        self.decode_share = FULL_SHARE  # its share of the decode steps (clustersim.acceptance)
        self.first_scheduled_at_s = math.nan
        self.first_token_at_s = math.nan
        self.finished_at_s = math.nan
        self.status: RequestStatus = "unfinished"
        self.reject_reason = ""
        self.num_preemptions = 0
        self.num_retries = 0  # times a failed replica handed it on
        self.remote_kv = NO_REMOTE_KV  # disaggregation: where its KV cache is on its way to the decode replica
        self.remote_kv_blocks = 0  # blocks the decode replica holds for it while its KV cache is on its way
        self.num_emitted_tokens = 0
        self.num_cached_prompt_tokens = 0  # prompt tokens its first admission found in the prefix cache
        self.last_token_at_s = math.nan  # kept while it is preempted (its next token's gap starts there)
        self.max_itl_s = -math.inf  # its greatest gap between two consecutive tokens so far
        self.gap_key: GapKey = (tenant, True)

    @property
    def measured(self) -> bool:
        """Whether the summary measures it (its arrival lies inside the scenario's ``metrics`` window)."""
        return self.gap_key[1]

    def __repr__(self) -> str:
        return (
            f"Request(id={self.request_id}, tenant={self.tenant!r}, at={self.arrival_at_s:.6g}s, "
            f"prompt={self.prompt_tokens}, output={self.output_tokens}, status={self.status})"
        )
