"""Progress shows on a terminal only, reads counters without touching them, and stops cleanly."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from clustersim.cli import main
from clustersim.progress import CountProgress, RunProgress, Snapshot, progress_enabled


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert progress_enabled(False, Terminal())
    assert not progress_enabled(True, Terminal())
    assert not progress_enabled(False, io.StringIO())
    monkeypatch.setenv("CI", "true")
    assert not progress_enabled(False, Terminal())
    monkeypatch.delenv("CI")
    monkeypatch.setenv("TERM", "dumb")
    assert not progress_enabled(False, Terminal())


def test_the_count_shows_done_failed_and_reused() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with CountProgress(5, "points", True, console) as bar:
        bar.advance(reused=True)
        bar.advance()
        bar.advance(failed=True)
    text = out.getvalue()
    assert "2/4" in text and "1 reused" in text and "1 failed" in text  # a reused point leaves the total
    silent = io.StringIO()
    with CountProgress(5, "points", False, Console(file=silent, force_terminal=True)) as bar:
        bar.advance()
    assert silent.getvalue() == "" and bar.failed == 0


def test_run_progress_reads_the_snapshot_and_its_thread_ends() -> None:
    reads: list[int] = []

    def snapshot() -> Snapshot:
        reads.append(1)
        return Snapshot(12.5, 340, 9_000)

    out = io.StringIO()
    watch = RunProgress(snapshot, True, 1000, Console(file=out, force_terminal=True, width=120), interval_s=0.01)
    assert watch.line().startswith("simulated 12.5 s, 340 of 1,000 requests finished, 9,000 events")
    with pytest.raises(KeyboardInterrupt), watch:
        threading.Event().wait(0.1)
        raise KeyboardInterrupt
    assert watch._thread is not None and not watch._thread.is_alive()
    assert len(reads) > 2
    idle = RunProgress(snapshot, False)
    with idle:
        pass
    assert idle._thread is None


def test_no_progress_noise_when_output_is_not_a_terminal(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", "static-vs-continuous", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0 and "simulated " not in result.output and "━" not in result.output
