"""``python -m clustersim.analysis RUN_DIR [--out FIG_DIR]``: write a run's figures and print their paths."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from clustersim.analysis.figures import write_figures
from clustersim.analysis.rundata import RunDirError

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, write the figures, print one path per line; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m clustersim.analysis", description="Write PNG figures for a clustersim run directory."
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="directory written by `clustersim run`")
    parser.add_argument(
        "--out", type=Path, default=None, metavar="FIG_DIR", help="where to write the PNGs (default RUN_DIR/figures)"
    )
    args = parser.parse_args(argv)
    try:
        paths = write_figures(args.run_dir, args.out)
    except RunDirError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # e.g. FIG_DIR not writable
        print(f"{parser.prog}: error: {exc.filename or args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
