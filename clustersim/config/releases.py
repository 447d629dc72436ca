"""Engine release numbers (pure): ``v0.4.2.post4`` is release ``(0, 4, 2)``."""

from __future__ import annotations

import re

_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def release_numbers(text: str) -> tuple[int, ...] | None:
    """An engine release's leading numbers (``"v0.4.2.post4"``: ``(0, 4, 2)``); None without any."""
    found = _RELEASE.match(text.strip())
    return tuple(int(part) for part in found.groups() if part is not None) if found else None


def checked_release(text: str) -> str:
    """``text`` if it is a release number, else ValueError saying so."""
    if release_numbers(text) is None:
        raise ValueError(f"'{text}' is not a release number such as 0.4.2")
    return text


def runs_before(version: str | None, since: str) -> bool:
    """Whether a run of release ``version`` predates release ``since`` (False when either is not a
    release number, or ``version`` is None: the profile's current release)."""
    running = release_numbers(version) if version else None
    first = release_numbers(since)
    return running is not None and first is not None and running < first
