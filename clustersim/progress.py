"""Progress on the terminal: points of a sweep done, and how far one long run has got.

Shown only when standard error is a terminal (not in CI, not with ``TERM=dumb``, not with
``--quiet``); otherwise every method does nothing. A run's progress is read by a background thread
from counters the simulation keeps anyway (the clock's time and event count, the request rows
written), a few times a second: it adds no work to the simulation and changes no result.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, NamedTuple

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def progress_enabled(quiet: bool, stream: IO[str] | None = None) -> bool:
    """Whether to show progress: on a terminal, unless quiet, in CI, or on a dumb terminal."""
    stream = stream if stream is not None else sys.stderr
    if quiet or os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class CountProgress:
    """A bar over ``total`` points: done of total, failed, rate and time left. Points reused from an
    earlier invocation leave the bar's total (they take no time and would distort the rate)."""

    def __init__(self, total: int, description: str, enabled: bool, console: Console | None = None) -> None:
        self.enabled = enabled
        self.total, self.failed, self.reused = total, 0, 0
        self._description = description
        self._progress: Progress | None = None
        if enabled:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[extra]}"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=console or Console(stderr=True),
                transient=False,
            )
            self._task = self._progress.add_task(description, total=total, extra="")

    def __enter__(self) -> CountProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()

    def set_total(self, total: int) -> None:
        self.total = total
        if self._progress is not None:
            self._progress.update(self._task, total=total - self.reused)

    def advance(self, failed: bool = False, reused: bool = False) -> None:
        """One point settled: run (and maybe failed), or reused."""
        self.failed += failed
        self.reused += reused
        if self._progress is None:
            return
        parts = [f"{self.reused} reused" if self.reused else "", f"{self.failed} failed" if self.failed else ""]
        extra = ", ".join(p for p in parts if p)
        if reused:
            self._progress.update(self._task, total=self.total - self.reused, extra=extra)
        else:
            self._progress.update(self._task, advance=1, extra=extra)


class Snapshot(NamedTuple):
    """How far a run has got: simulated seconds, requests finished (their rows written), events."""

    simulated_s: float
    num_finished: int
    num_events: int


class RunProgress:
    """One long run: simulated time, requests finished (of the total when known), events and wall
    time, refreshed by a daemon thread that only reads ``snapshot``."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        enabled: bool,
        num_requests: int | None = None,
        console: Console | None = None,
        interval_s: float = 0.25,
    ) -> None:
        self.snapshot, self.enabled, self.num_requests, self.interval_s = snapshot, enabled, num_requests, interval_s
        self._console = console or Console(stderr=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.perf_counter()

    def line(self) -> str:
        """The progress line for the current snapshot."""
        now = self.snapshot()
        of = f" of {self.num_requests:,}" if self.num_requests else ""
        wall_s = time.perf_counter() - self._started
        return (f"simulated {now.simulated_s:,.1f} s, {now.num_finished:,}{of} requests finished, "
                f"{now.num_events:,} events, {wall_s:.0f} s wall")  # fmt: skip

    def _loop(self) -> None:
        with self._console.status(self.line(), spinner="dots") as status:
            while not self._stop.wait(self.interval_s):
                status.update(self.line())

    def __enter__(self) -> RunProgress:
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, name="clustersim-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
