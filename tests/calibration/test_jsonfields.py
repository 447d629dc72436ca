"""Typed reads from a tool's JSON: each wrong or missing value is one line naming the file and key path."""

from __future__ import annotations

import math

import pytest

from clustersim.calibration.jsonfields import JsonObject
from clustersim.errors import ConfigError

DOC = JsonObject(
    {"n": 3, "x": 1.5, "flag": True, "name": "a", "empty": None, "inner": {"k": [1, 2.5]}, "rows": [{"a": 1}, 2]},
    "f.json",
)


def test_values_of_the_right_type() -> None:
    assert (DOC.number("x"), DOC.count("n"), DOC.text("name")) == (1.5, 3, "a")
    assert DOC.optional_number("empty") is None and DOC.optional_text("absent") is None
    inner = DOC.child("inner")
    assert inner.path == "inner" and inner.numbers("k", 2) == [1.0, 2.5]
    assert DOC.lookup("inner", "k") == [1, 2.5] and DOC.lookup("inner", "nothing", "deeper") is None


@pytest.mark.parametrize(
    ("read", "field", "words"),
    [
        (lambda: DOC.number("absent"), "absent", "missing: expected a number"),
        (lambda: DOC.number("empty"), "empty", "missing: expected a number"),
        (lambda: DOC.number("flag"), "flag", "expected a finite number, got true/false True"),
        (lambda: DOC.number("name"), "name", "expected a finite number, got text 'a'"),
        (lambda: DOC.count("x"), "x", "expected a whole number of at least 0, got 1.5"),
        (lambda: DOC.text("n"), "n", "expected text, got a number 3"),
        (lambda: DOC.child("name"), "name", "expected an object, got text 'a'"),
        (lambda: DOC.objects("rows"), "rows[1]", "expected an object, got a number"),
        (
            lambda: DOC.child("inner").numbers("k", 3),
            "inner.k",
            "has 2 entries where the other per-request lists have 3",
        ),
        (lambda: JsonObject({"v": math.inf}, "f.json").number("v"), "v", "expected a finite number"),
    ],
)
def test_wrong_values_are_one_line(read: object, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        read()  # type: ignore[operator]
    assert (caught.value.source, caught.value.field_path) == ("f.json", field)
    assert words in caught.value.problem and "\n" not in str(caught.value)
