"""Single rows' predictions kept by what each row's simulation reads of a fit's values.

A corpus fit re-runs every row for each of its evaluations and Jacobians, and a refit runs one fit for all
rows and one per publisher left out. A row's simulation reads only its own engine's scales on its own GPU
family and that engine's front-end times, and is deterministic, so a row whose values are the same in two
runs predicts the same: the fits of a refit start from the same all-rows values except where their
left-out rows reset them, so their first evaluations and Jacobians repeat most rows' runs exactly. The
memo keeps the last runs (least recently used first out) and answers those from them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from clustersim.validation.predict import Prediction

RUNS_PER_ROW = 48  # kept per row on average: about two fits' evaluations and Jacobians


class RowMemo:
    """Predictions by key (a row and the values its simulation reads), the ``max_entries`` last used."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"a memo keeps at least one prediction, not {max_entries}")
        self.max_entries = max_entries
        self._found: OrderedDict[Hashable, Prediction | None] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._found)

    def lookup(self, key: Hashable) -> tuple[bool, Prediction | None]:
        """Whether ``key`` is kept, and its prediction (None also where its row failed)."""
        if key not in self._found:
            self.misses += 1
            return False, None
        self.hits += 1
        self._found.move_to_end(key)
        return True, self._found[key]

    def keep(self, key: Hashable, found: Prediction | None) -> None:
        self._found[key] = found
        self._found.move_to_end(key)
        while len(self._found) > self.max_entries:
            self._found.popitem(last=False)
