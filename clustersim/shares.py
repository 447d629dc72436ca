"""A decoding sequence's share of its replica's decode steps (pure, imports nothing of the project).

Sequences decode in lockstep, one decode step at a time. A sequence of *share* p (in 1/``FULL_SHARE``)
gains a token at decode step D exactly when ``(D * p) // FULL_SHARE`` grows: at p / ``FULL_SHARE`` of
the steps, in a fixed, evenly spread pattern that every sequence of that share follows. Speculative
decoding with requests of different acceptance rates gives them different shares
(:mod:`clustersim.acceptance`); otherwise every sequence has the full share, a token every step.
"""

from __future__ import annotations

FULL_SHARE = 1024  # the quantum: a share is rounded to 1/1024 of the fastest sequence's pace


def share_tokens(index: int, share: int) -> int:
    """Tokens a sequence of ``share`` gains over decode steps ``0..index`` (floor: -1 at index -1)."""
    return index if share == FULL_SHARE else index * share // FULL_SHARE


def gains_at(index: int, share: int) -> bool:
    """Whether a sequence of ``share`` gains a token at decode step ``index``: ``share_tokens`` grows
    from ``index - 1`` to ``index`` exactly when ``index * share mod FULL_SHARE < share``."""
    return index * share % FULL_SHARE < share
