"""A closed-loop user's multi-turn conversation (pure): each turn's prompt repeats the chat so far.

Turn ``k + 1``'s prompt is turn ``k``'s prompt and output followed by a new message, as a chat
client resends the history (vLLM's multi-turn benchmark, ``benchmarks/multi_turn``; Mooncake's
conversation trace). A turn carries ids for the blocks of its prompt and output
(``prefix_block_tokens`` each, negative so they never meet a trace's ids): block ``i`` of a
conversation has the same id in every turn, so prefix caching finds the history cached.
"""

from __future__ import annotations

from collections.abc import Iterator

IDS_PER_CONVERSATION = 2**20  # block ids of one conversation: enough for 2**20 blocks of context


class Conversation:
    """The state of one user's current conversation."""

    __slots__ = ("_ids", "block_tokens", "context_tokens", "max_context_tokens", "num_turns", "turn", "uid")

    def __init__(self, num_turns: int, max_context_tokens: int | None, block_tokens: int, ids: Iterator[int]) -> None:
        self.num_turns = num_turns
        self.max_context_tokens = max_context_tokens
        self.block_tokens = block_tokens
        self._ids = ids  # conversation numbers, shared by every user of the run
        self.uid = next(ids)
        self.turn = 0
        self.context_tokens = 0  # the previous turn's prompt + output

    def next_turn(self, message_tokens: int, output_tokens: int) -> tuple[int, tuple[int, ...]]:
        """The next turn's prompt tokens and block ids, for a new message and its output."""
        prompt_tokens = self.context_tokens + message_tokens
        too_long = self.max_context_tokens is not None and prompt_tokens + output_tokens > self.max_context_tokens
        if self.turn >= self.num_turns or (self.turn and too_long):
            self.restart()
            prompt_tokens = message_tokens
        num_blocks = -(-(prompt_tokens + output_tokens) // self.block_tokens)
        base = self.uid * IDS_PER_CONVERSATION
        return prompt_tokens, tuple(-1 - (base + i) for i in range(num_blocks))

    def ended(self, prompt_tokens: int, output_tokens: int, completed: bool) -> None:
        """A turn ended: a completed one becomes the history; a rejected or unfinished one ends the chat."""
        if completed:
            self.context_tokens = prompt_tokens + output_tokens
            self.turn += 1
        else:
            self.restart()

    def restart(self) -> None:
        self.uid = next(self._ids)
        self.turn = 0
        self.context_tokens = 0
