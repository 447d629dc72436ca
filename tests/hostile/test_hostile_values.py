"""A table of hostile values for every kind of scenario field: each run ends in exit 0 or in one
line and exit 2, never a traceback or an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_cli import FIELDS, assert_answered, cli, hostile_dir_fixture  # noqa: F401 - the fixture hostile_dir

VALUES = (
    "true",
    ".inf",
    "-.inf",
    ".nan",
    "-1",
    "0",
    "1e-320",
    "1e400",
    str(2**70),
    "abc",
    "[]",
    "{}",
    "null",
    "'a\\nb'",
)


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("field", FIELDS)
def test_hostile_value_is_answered_in_one_line(hostile_dir: Path, field: str, value: str) -> None:
    result = cli("run", "tiny.yaml", "--out", "out", "--quiet", "--set", f"{field}={value}")
    assert_answered(result)
    if result.exit_code == 0:
        assert (hostile_dir / "out" / "summary.json").is_file() and not (hostile_dir / "out" / "INCOMPLETE").exists()
    else:
        assert not (hostile_dir / "out").exists()  # nothing is written for a scenario that cannot run
