"""What the KV manager knows of a sequence, and the admission reservation rules (pure).

The replica's seats extend :class:`KVSequence` with their scheduling state; the KV manager reads
and writes only the fields declared here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from clustersim.architecture import blocks_for_tokens
from clustersim.kvcache.prefix import Segment
from clustersim.shares import FULL_SHARE

Reservation = Literal["grow", "sequence", "max_output", "max_model_len"]


class Lengths(Protocol):
    """The request a sequence serves, as KV accounting needs it."""

    @property
    def request_id(self) -> int: ...

    @property
    def num_preemptions(self) -> int: ...

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...

    @property
    def num_emitted_tokens(self) -> int: ...

    @property
    def tenant(self) -> str: ...

    @property
    def prefix_hash_ids(self) -> tuple[int, ...]: ...

    @property
    def ids_cover_output(self) -> bool: ...


class KVSequence:
    """A sequence holding KV memory.

    ``kv_offset``: once decoding, its KV tokens after decode step D are ``kv_offset + D`` (with a
    ``share`` below the full one, ``kv_offset + share_tokens(D, share)``).
    ``cached_tokens``: leading prompt tokens reused from the prefix cache (whole blocks).
    ``reserved_blocks``: blocks taken on admission; ``region_start``: its region in a contiguous space.
    """

    __slots__ = (
        "alive",
        "cached_tokens",
        "decoding",
        "hit_segments",
        "kv_offset",
        "own_segments",
        "region_start",
        "request",
        "reserved_blocks",
        "share",
    )

    def __init__(self, request: Lengths, cached_tokens: int = 0) -> None:
        self.request = request
        self.alive = True
        self.decoding = False
        self.kv_offset = 0
        self.cached_tokens = cached_tokens
        self.reserved_blocks = 0
        self.region_start = -1
        self.share = FULL_SHARE
        self.hit_segments: list[Segment] = []  # cached segments it reuses (pinned while it runs)
        self.own_segments: list[Segment] = []  # its prompt's other segments: cached when it leaves


@dataclass(frozen=True, slots=True)
class Reserve:
    """How many KV blocks a sequence takes on admission.

    ``grow`` takes blocks for the prompt and then one at a time (paged, iteration level);
    ``sequence`` reserves prompt + output up front (static batching on paged blocks);
    ``max_output`` reserves prompt + ``reserve_tokens`` and ``max_model_len`` reserves
    ``reserve_tokens`` (contiguous regions).
    """

    block_size_tokens: int
    reservation: Reservation = "grow"
    reserve_tokens: int = 0


def prefill_tokens_of(request: Lengths) -> int:
    """Tokens a (re)admitted request prefills: its prompt plus any output it made before preemption."""
    return request.prompt_tokens + request.num_emitted_tokens


def blocks_to_admit(request: Lengths, reserve: Reserve, cached_tokens: int = 0) -> int:
    """KV blocks a request takes on admission (see :class:`Reserve`).

    Growing sequences take blocks for the whole prompt, even when it is prefilled in chunks, less
    the ``cached_tokens`` (whole blocks) they reuse from the prefix cache.
    """
    bs = reserve.block_size_tokens
    if reserve.reservation == "sequence":
        return blocks_for_tokens(request.prompt_tokens + request.output_tokens - 1, bs)
    if reserve.reservation == "max_output":
        return blocks_for_tokens(request.prompt_tokens + reserve.reserve_tokens, bs)
    if reserve.reservation == "max_model_len":
        return blocks_for_tokens(reserve.reserve_tokens, bs)
    return blocks_for_tokens(prefill_tokens_of(request), bs) - cached_tokens // bs


def capacity_reason(request: Lengths, reserve: Reserve, num_total_blocks: int, watermark_blocks: int) -> str:
    """Why ``request`` can never fit this KV cache, or an empty string if it can."""
    total_tokens = request.prompt_tokens + request.output_tokens
    if reserve.reservation == "max_output" and request.output_tokens > reserve.reserve_tokens:
        return f"output of {request.output_tokens} tokens exceeds kv.max_output_tokens {reserve.reserve_tokens}"
    if reserve.reservation == "max_model_len" and total_tokens > reserve.reserve_tokens:
        return f"prompt + output = {total_tokens} tokens exceeds the reserved max length {reserve.reserve_tokens}"
    on_admission = blocks_to_admit(request, reserve)
    needed = max(blocks_for_tokens(total_tokens - 1, reserve.block_size_tokens), on_admission)
    if needed > num_total_blocks:
        return f"needs {needed} KV blocks, the replica has {num_total_blocks}"
    if on_admission > num_total_blocks - watermark_blocks:
        return (
            f"needs {on_admission} KV blocks on admission, more than the {num_total_blocks - watermark_blocks} "
            f"the replica admits above its {watermark_blocks}-block watermark"
        )
    return ""
