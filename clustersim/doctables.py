"""Tables of measured figures in the docs, rewritten in place by the commands that measure them.

A table lives between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` in a Markdown file; the
commands that measure (``bench``, ``compare``, ``validate-cost``) take ``--doc FILE#name`` and
replace that block with the table and the command line that produced it. A block that does not
exist yet is added at the end of the file.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from clustersim.errors import ClusterSimError


def parse_target(target: str) -> tuple[Path, str]:
    """``docs/speed.md#bench`` -> (path, block name); a one-line error if malformed."""
    path, _, name = target.partition("#")
    if not path or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ClusterSimError(f"--doc: expected FILE.md#name (name: letters, digits, - or _), got '{target}'")
    return Path(path), name


def shown_command(argv: list[str]) -> str:
    """The command line as a reader would type it, without ``--doc`` and ``--out`` (where files went)."""
    shown, skip = ["clustersim"], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--doc", "--out"):
            skip = True
        elif not arg.startswith(("--doc=", "--out=")):
            shown.append(shlex.quote(arg))
    return " ".join(shown)


def write_doc_table(target: str, markdown: str, command: str, note: str = "") -> Path:
    """Put ``markdown`` (and how it was made) in the named block of the file; returns the file."""
    path, name = parse_target(target)
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    made = f"Written by `{command}`" + (f" ({note})" if note else "") + "."
    block = f"{begin}\n{markdown.rstrip()}\n\n{made}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _: block, text, count=1) if pattern.search(text) else f"{text.rstrip()}\n\n{block}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text.lstrip("\n"), encoding="utf-8")
    os.replace(partial, path)
    return path
