"""What several commands share: finding a scenario or data file by name, writing a table into the docs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from clustersim.config.catalogue import builtin_data_dir
from clustersim.doctables import parse_target, shown_command, write_doc_table
from clustersim.errors import ClusterSimError
from clustersim.guard import fail

FC = TypeVar("FC", bound=Callable[..., Any])


def check_doc_target(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A ``--doc FILE.md#name`` checked when the command starts, not after its work is done."""
    if value is not None:
        try:
            parse_target(value)
        except ClusterSimError as exc:
            fail(str(exc))
    return value


def doc_option(what: str = "table") -> Callable[[FC], FC]:
    """The ``--doc FILE.md#NAME`` option every table-writing command takes, checked at start."""
    return click.option(
        "--doc",
        metavar="FILE.md#NAME",
        callback=check_doc_target,
        help=f"Also write the {what} into that block of a Markdown file.",
    )


def write_doc(target: str, markdown: str, note: str = "") -> None:
    try:
        path = write_doc_table(target, markdown, shown_command(sys.argv[1:]), note)
    except (ClusterSimError, OSError) as exc:
        fail(str(exc))
        return
    click.echo(f"wrote the table into {path}")


def resolve_scenario_path(scenario: str | None) -> Path:
    """A path as given, else a built-in scenario by name; no argument means the built-in default."""
    if scenario is None:
        return builtin_data_dir("scenarios") / "default.yaml"
    path = Path(scenario)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    builtin = builtin_data_dir("scenarios") / f"{scenario}.yaml"
    return builtin if builtin.exists() else path


def resolve_data_file(argument: str, folder: str) -> Path:
    """A path as given, else a built-in file by name (``scenarios/<folder>/<name>.yaml``)."""
    path = Path(argument)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    builtin = builtin_data_dir("scenarios") / folder / f"{argument}.yaml"
    return builtin if builtin.exists() else path
