"""The command's guard: bad input ends in one line and exit 2, anything unexpected in one line that
points at a crash report holding the traceback, and exit 3; never a raw traceback on the terminal."""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import click

from clustersim import __version__
from clustersim.errors import ClusterSimError, one_line

EXIT_BAD_INPUT = 2
EXIT_BUG = 3
EXIT_INTERRUPTED = 130


def fail(message: str) -> None:
    click.echo(f"clustersim: error: {one_line(message)}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def write_crash_report(exc: BaseException, argv: list[str]) -> Path:
    """Write the traceback of an unexpected exception to a new file in the temporary folder."""
    handle, name = tempfile.mkstemp(prefix=f"clustersim-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
    with os.fdopen(handle, "w", encoding="utf-8") as report:
        report.write(f"clustersim {__version__}, Python {platform.python_version()}, {platform.platform()}\n")
        report.write(f"command: clustersim {' '.join(argv)}\n\n")
        report.write("".join(traceback.format_exception(exc)))
    return Path(name)


class GuardedGroup(click.Group):
    """The command group, with a guard: bad input and unwritable places end in one line and exit 2,
    anything unexpected in one line pointing at a crash report with the traceback and exit 3."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except ClusterSimError as exc:
            fail(str(exc))
        except OSError as exc:  # the environment: a disk full, a folder not writable, a path too long
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or type(exc).__name__}")
        except KeyboardInterrupt:
            click.echo("clustersim: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:  # the guard of last resort
            argv = sys.argv[1:]
            try:
                report = str(write_crash_report(exc, argv))
            except OSError:
                report = "(could not be written)"
            what = one_line(" ".join(argv[:2]), 120)
            click.echo(
                f"clustersim: internal error running '{what}': {one_line(type(exc).__name__)}; "
                f"the traceback is in {report} (please include it in a bug report)",
                err=True,
            )
            sys.exit(EXIT_BUG)
        return None
