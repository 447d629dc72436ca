"""Batching policies as pure decisions: may this request join the next step, and why is it refused?

The replica process asks these functions and applies their answers (allocates blocks, starts
prefills); nothing here touches simpy or mutates state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clustersim.architecture import blocks_for_tokens
from clustersim.workload.request import Request

BatchingPolicy = Literal["static", "continuous", "vllm", "chunked_prefill"]
SloAdmission = Literal["off", "defer", "shed"]


Reservation = Literal["grow", "sequence", "max_output", "max_model_len"]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """The knobs that bound one step of one replica, and how it reserves KV blocks.

    ``reservation``: ``grow`` takes blocks for the prompt and then one at a time (paged, iteration
    level); ``sequence`` reserves prompt + output up front (static batching on paged blocks);
    ``max_output`` reserves prompt + ``reserve_tokens`` and ``max_model_len`` reserves
    ``reserve_tokens`` (contiguous regions).
    """

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size_tokens: int
    reservation: Reservation = "grow"
    reserve_tokens: int = 0


def prefill_tokens_of(request: Request) -> int:
    """Tokens a (re)admitted request prefills: its prompt plus any output it made before preemption."""
    return request.prompt_tokens + request.num_emitted_tokens


def blocks_to_admit(request: Request, limits: BatchLimits, cached_tokens: int = 0) -> int:
    """KV blocks a request takes on admission (see :class:`BatchLimits` ``reservation``).

    Growing policies take blocks for the whole prompt, even when it is prefilled in chunks, less
    the ``cached_tokens`` (whole blocks) it reuses from the prefix cache.
    """
    bs = limits.block_size_tokens
    if limits.reservation == "sequence":
        return blocks_for_tokens(request.prompt_tokens + request.output_tokens - 1, bs)
    if limits.reservation == "max_output":
        return blocks_for_tokens(request.prompt_tokens + limits.reserve_tokens, bs)
    if limits.reservation == "max_model_len":
        return blocks_for_tokens(limits.reserve_tokens, bs)
    return blocks_for_tokens(prefill_tokens_of(request), bs) - cached_tokens // bs


def token_budget(policy: BatchingPolicy, limits: BatchLimits, num_decode_tokens: int) -> int:
    """Prompt tokens a step can still take: ``vllm`` prefill steps run no decodes, the others share the budget."""
    if policy == "vllm":
        return limits.max_num_batched_tokens
    return limits.max_num_batched_tokens - num_decode_tokens


def admits(
    request: Request,
    policy: BatchingPolicy,
    limits: BatchLimits,
    num_seats_used: int,
    tokens_left: int,
    num_free_blocks: int,
    first_in_step: bool,
    cached_tokens: int = 0,
) -> bool:
    """Whether ``request`` fits the next step: a seat, its KV blocks, and its prompt within the token budget.

    ``chunked_prefill`` needs only some budget left (the prompt is split into chunks). A request
    preempted earlier whose recompute alone exceeds the budget is admitted as the step's first
    prefill, so it can never be stuck.
    """
    if num_seats_used >= limits.max_num_seqs:
        return False
    if blocks_to_admit(request, limits, cached_tokens) > num_free_blocks:
        return False
    if policy == "chunked_prefill":
        return tokens_left > 0
    if prefill_tokens_of(request) - cached_tokens <= tokens_left:
        return True
    return first_in_step and request.num_emitted_tokens > 0


def rejection_reason(
    request: Request,
    policy: BatchingPolicy,
    limits: BatchLimits,
    num_total_blocks: int,
    max_model_len_tokens: int,
    watermark_blocks: int = 0,
) -> str:
    """Why ``request`` can never be served by this replica, or an empty string if it can."""
    total_tokens = request.prompt_tokens + request.output_tokens
    if total_tokens > max_model_len_tokens:
        return f"prompt + output = {total_tokens} tokens exceeds the model's max length {max_model_len_tokens}"
    if policy != "chunked_prefill" and request.prompt_tokens > limits.max_num_batched_tokens:
        return (
            f"prompt of {request.prompt_tokens} tokens exceeds max_num_batched_tokens "
            f"{limits.max_num_batched_tokens} (chunked_prefill would split it)"
        )
    if limits.reservation == "max_output" and request.output_tokens > limits.reserve_tokens:
        return f"output of {request.output_tokens} tokens exceeds kv.max_output_tokens {limits.reserve_tokens}"
    if limits.reservation == "max_model_len" and total_tokens > limits.reserve_tokens:
        return f"prompt + output = {total_tokens} tokens exceeds the reserved max length {limits.reserve_tokens}"
    needed = max(blocks_for_tokens(total_tokens - 1, limits.block_size_tokens), blocks_to_admit(request, limits))
    if needed > num_total_blocks:
        return f"needs {needed} KV blocks, the replica has {num_total_blocks}"
    on_admission = blocks_to_admit(request, limits)
    if on_admission > num_total_blocks - watermark_blocks:
        return (
            f"needs {on_admission} KV blocks on admission, more than the {num_total_blocks - watermark_blocks} "
            f"the replica admits above its {watermark_blocks}-block watermark"
        )
    return ""


def misses_ttft(request: Request, now_s: float, prefill_s: float, ttft_target_s: float) -> bool:
    """Whether a request admitted now would get its first token after its TTFT target."""
    return now_s - request.arrival_at_s + prefill_s > ttft_target_s
