"""Where a run writes: folder names made safe, default folders unique, a user's ``--out`` checked.

A run only ever writes inside the folder it is given (``--out``) or a new folder under ``runs/``.
Names that come from a scenario (its ``name``, a compared value) are reduced to letters, digits,
``.``, ``_`` and ``-`` and never start with a dot, so they cannot climb out or hide. A default
folder is created exclusively (two runs started in the same second get two folders). A reused
``--out`` first loses the files an earlier run left there, so old and new files never mix, and a
lock held while a run writes keeps two runs out of one folder.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from clustersim.errors import ConfigError, shown_value

MAX_NAME_CHARS = 80
_OUTPUTS = ("summary.json", "requests.parquet", "steps.parquet", "memory.parquet", "itl.parquet")
RUN_FILES = ("INCOMPLETE", *_OUTPUTS, *(f"{name}.partial" for name in _OUTPUTS))  # what a run leaves
LOCK_FILE = ".clustersim.lock"


def safe_name(text: str, fallback: str = "run") -> str:
    """``text`` as one folder name: safe characters only, no leading dot, at most 80 characters."""
    kept = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "-" for c in text)
    name = "-".join(part for part in kept.split("-") if part).lstrip(".-")[:MAX_NAME_CHARS].rstrip(".-")
    return name or fallback


def unique_names(names: Iterable[str]) -> list[str]:
    """The names made distinct: a repeated name gets ``-2``, ``-3``, ... (case-insensitively)."""
    seen: set[str] = set()
    result = []
    for name in names:
        candidate, suffix = name, 1
        while candidate.lower() in seen:
            suffix += 1
            candidate = f"{name}-{suffix}"
        seen.add(candidate.lower())
        result.append(candidate)
    return result


def new_default_folder(name: str, parent: Path = Path("runs")) -> Path:
    """Create and return a new folder ``parent/<safe name>-<time>`` (``-2``, ``-3``... if taken)."""
    base = f"{safe_name(name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    _check_folder_path(parent, "the runs folder")
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 10_000):
        path = parent / (base if attempt == 1 else f"{base}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ConfigError(str(parent), "", "could not create a new run folder (10,000 taken)")


def _check_folder_path(path: Path, what: str) -> None:
    if "\x00" in str(path):
        raise ConfigError(what, shown_value(str(path)), "contains a NUL character")
    try:
        for place in (path, *path.parents):
            if place.exists() and not place.is_dir():
                problem = "is a file, not a folder" if place == path else f"is under {shown_value(str(place))}, a file"
                raise ConfigError(what, shown_value(str(path)), problem)
    except OSError as exc:  # a name too long, a folder not readable
        raise ConfigError(what, shown_value(str(path)), f"cannot write there: {exc.strerror}") from None


@contextlib.contextmanager
def claimed_folder(path: Path, what: str = "--out") -> Iterator[Path]:
    """Create ``path`` if needed, hold an exclusive lock on it while the body writes there (released
    if the process dies), and first remove the run files an earlier run left in it."""
    _check_folder_path(path, what)
    try:
        path.mkdir(parents=True, exist_ok=True)
        lock = (path / LOCK_FILE).open("a", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(what, shown_value(str(path)), f"cannot write there: {exc.strerror}") from None
    try:
        _lock(lock, path, what)
    except BaseException:
        lock.close()
        raise
    try:
        for name in RUN_FILES:
            with contextlib.suppress(FileNotFoundError):
                (path / name).unlink()
        yield path
    finally:
        with contextlib.suppress(OSError):
            (path / LOCK_FILE).unlink()
        lock.close()


def _lock(handle: IO[str], folder: Path, what: str) -> None:
    try:
        import fcntl
    except ImportError:  # not on this platform: no lock
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ConfigError(what, shown_value(str(folder)), "another clustersim run is writing there") from None
    handle.write(f"{os.getpid()}\n")
    handle.flush()
