"""Batching policies: pure functions that decide which waiting requests join the next step.

A policy looks at the head of the waiting queue and the replica's free capacity and returns
a decision; the replica process applies it (allocates blocks, starts prefills).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from clustersim.architecture import blocks_for_tokens
from clustersim.workload.request import Request

BatchingPolicy = Literal["static", "continuous"]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """The knobs that bound one step of one replica."""

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size_tokens: int


@dataclass(frozen=True, slots=True)
class Admission:
    """Admit ``request``: prefill ``prefill_tokens`` tokens, holding ``num_blocks`` KV blocks."""

    request: Request
    prefill_tokens: int
    num_blocks: int


def prefill_tokens_of(request: Request) -> int:
    """Tokens a (re)admitted request prefills: its prompt plus any output it made before preemption."""
    return request.prompt_tokens + request.num_emitted_tokens


def blocks_to_admit(request: Request, policy: BatchingPolicy, block_size_tokens: int) -> int:
    """KV blocks a request must get on admission.

    ``continuous`` allocates for the prefill and grows block by block; ``static`` reserves
    the whole sequence (prompt + output) up front and never grows.
    """
    if policy == "static":
        return blocks_for_tokens(request.prompt_tokens + request.output_tokens - 1, block_size_tokens)
    return blocks_for_tokens(prefill_tokens_of(request), block_size_tokens)


def select_admissions(
    waiting: Iterable[Request],
    policy: BatchingPolicy,
    limits: BatchLimits,
    num_running: int,
    num_decode_tokens: int,
    num_free_blocks: int,
) -> list[Admission]:
    """First-come first-served admission: take requests from the head of ``waiting`` while they fit.

    Stops at the first request that does not fit (no overtaking). ``static`` admits only into
    an idle replica. A request preempted earlier whose recompute alone exceeds the token budget
    is admitted alone as the step's only prefill, so it can never be stuck.
    """
    if policy == "static" and num_running > 0:
        return []
    admitted: list[Admission] = []
    num_tokens = num_decode_tokens
    free_blocks = num_free_blocks
    for request in waiting:
        if num_running + len(admitted) >= limits.max_num_seqs:
            break
        prefill = prefill_tokens_of(request)
        over_budget = num_tokens + prefill > limits.max_num_batched_tokens
        if over_budget and not (admitted == [] and request.num_emitted_tokens > 0):
            break
        num_blocks = blocks_to_admit(request, policy, limits.block_size_tokens)
        if num_blocks > free_blocks:
            break
        admitted.append(Admission(request, prefill, num_blocks))
        num_tokens += prefill
        free_blocks -= num_blocks
        if over_budget:
            break
    return admitted


def rejection_reason(
    request: Request, policy: BatchingPolicy, limits: BatchLimits, num_total_blocks: int, max_model_len_tokens: int
) -> str:
    """Why ``request`` can never be served by this replica, or an empty string if it can."""
    total_tokens = request.prompt_tokens + request.output_tokens
    if total_tokens > max_model_len_tokens:
        return f"prompt + output = {total_tokens} tokens exceeds the model's max length {max_model_len_tokens}"
    if request.prompt_tokens > limits.max_num_batched_tokens:
        return (
            f"prompt of {request.prompt_tokens} tokens exceeds max_num_batched_tokens {limits.max_num_batched_tokens}"
        )
    needed = blocks_for_tokens(total_tokens - 1, limits.block_size_tokens)
    if needed > num_total_blocks:
        return f"needs {needed} KV blocks, the replica has {num_total_blocks}"
    return ""
