"""The errors clustersim raises for bad input; the CLI prints them as one line and exits 2."""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable

MAX_MESSAGE_CHARS = 400
MAX_SHOWN_VALUE_CHARS = 60


class ClusterSimError(Exception):
    """Base class for every error that is the user's input, not a bug in clustersim."""


class ConfigError(ClusterSimError):
    """A scenario, profile or override that cannot be used.

    The message always reads ``<file>: <field.path>: <problem>`` so that a user can go
    straight to the offending line.
    """

    def __init__(self, source: str, field_path: str, problem: str) -> None:
        self.source = source
        self.field_path = field_path
        self.problem = problem
        where = f"{source}: {field_path}" if field_path else source
        super().__init__(f"{where}: {problem}")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    lowered: dict[str, str] = {}
    for choice in choices:  # the first spelling of a name wins: canonical names come before their aliases
        lowered.setdefault(choice.lower(), choice)
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean '{lowered[close[0]]}'?)" if close else ""


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` safe to print as one terminal line: control characters (newlines, NUL, escapes)
    shown escaped, at most ``limit`` characters."""
    shown = "".join(repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "\u2026"


def shown_value(value: object) -> str:
    """A user's value quoted in a message: one line, cut short (it may come from a large file)."""
    return one_line(repr(value), MAX_SHOWN_VALUE_CHARS)
