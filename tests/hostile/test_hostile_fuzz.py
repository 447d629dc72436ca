"""Fuzz the command as a hostile user would: random values in scenario fields, ``--set`` arguments,
trace rows and custom profile files. Every run ends in exit 0 with a finished folder, or in one
line and exit 2 with nothing written; never a traceback or an internal error.

The default run tries a few dozen examples of each; ``pytest -m slow`` (or
``CLUSTERSIM_FUZZ_EXAMPLES=N``) hunts longer.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile_cli import FIELDS, TINY, assert_answered, cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.config.catalogue import builtin_data_dir

EXAMPLES = int(os.environ.get("CLUSTERSIM_FUZZ_EXAMPLES", "40"))
SLOW_EXAMPLES = 400
FUZZ = settings(deadline=None, max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), derandomize=True)
HUNT = settings(deadline=None, max_examples=SLOW_EXAMPLES, suppress_health_check=list(HealthCheck))

# a stop that keeps every fuzzed run short: 20 requests, and 2 s of simulated time
BASE: dict[str, Any] = {**yaml.safe_load(TINY), "stop": {"max_requests": 20, "horizon_s": 2.0}}

numbers = st.one_of(
    st.integers(-(2**80), 2**80),
    st.integers(-5, 5000),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.floats(min_value=1e-6, max_value=1e6),
)
values = st.one_of(
    numbers,
    st.none(),
    st.booleans(),
    st.text(max_size=20),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
cell = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "NaT", "nan", "1e30", "2023-11-16 18:15:46.68", "1700000000", "0x10", "1_000"]),
    # a file on disk holds no lone surrogates (UTF-8 cannot encode them): any other character may come
    st.text(alphabet=st.characters(blacklist_characters=",\r\n", blacklist_categories=("Cs",)), max_size=12),
)


@contextmanager
def working_folder() -> Iterator[Path]:
    """A fresh current folder for one example (hypothesis runs many examples in one test)."""
    old = Path.cwd()
    with tempfile.TemporaryDirectory() as name:
        os.chdir(name)
        try:
            yield Path(name)
        finally:
            os.chdir(old)


def run_and_check(folder: Path, scenario: dict[str, Any], *extra: str) -> None:
    (folder / "s.yaml").write_text(yaml.safe_dump(scenario, allow_unicode=True), encoding="utf-8")
    result = cli("run", "s.yaml", "--out", "out", "--quiet", *extra)
    assert_answered(result)
    if result.exit_code == 0:
        assert (folder / "out" / "summary.json").is_file() and not (folder / "out" / "INCOMPLETE").exists()
    else:
        assert not (folder / "out").exists()


def with_value(path: str, value: Any) -> dict[str, Any]:
    """The base scenario with ``path`` (dotted; digits index lists) set to ``value``."""
    scenario = json.loads(json.dumps(BASE))
    node: Any = scenario
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[keys[-1]] = value
    return scenario


def scenario_values(path: str, value: Any) -> None:
    with working_folder() as folder:
        run_and_check(folder, with_value(path, value))


def set_arguments(key: str, value: str) -> None:
    with working_folder() as folder:
        run_and_check(folder, BASE, "--set", f"{key}={value}")


def trace_rows(fmt: str, rows: list[list[str]]) -> None:
    header = {"csv": "arrival_at_s,prompt_tokens,output_tokens", "azure": "TIMESTAMP,ContextTokens,GeneratedTokens"}
    with working_folder() as folder:
        (folder / "t.csv").write_text("\n".join([header[fmt], *(",".join(r) for r in rows)]) + "\n", encoding="utf-8")
        scenario = with_value("workload.tenants.0.arrival", {"kind": "trace", "path": "t.csv", "format": fmt})
        run_and_check(folder, scenario)


def mooncake_records(records: list[dict[str, Any]]) -> None:
    with working_folder() as folder:
        text = "\n".join(json.dumps(r) for r in records) + "\n"
        (folder / "t.jsonl").write_text(text, encoding="utf-8")
        scenario = with_value("workload.tenants.0.arrival", {"kind": "trace", "path": "t.jsonl", "format": "mooncake"})
        run_and_check(folder, scenario)


PROFILES = {
    "hardware": "gpus/h100-sxm.yaml",
    "model": "models/llama-3.1-8b.yaml",
    "engine": "engines/vllm-v1.yaml",
}


def profile_fields() -> list[tuple[str, str]]:
    fields = []
    for kind, file in PROFILES.items():
        profile = yaml.safe_load((builtin_data_dir("hardware_profiles") / file).read_text(encoding="utf-8"))
        fields += [(kind, name) for name, entry in profile.items() if isinstance(entry, dict) and "value" in entry]
    return fields


def profile_value(kind: str, field: str, value: Any) -> None:
    with working_folder() as folder:
        profile = yaml.safe_load((builtin_data_dir("hardware_profiles") / PROFILES[kind]).read_text(encoding="utf-8"))
        profile[field] = {"value": value, "source": "a fuzz test"}
        (folder / "custom.yaml").write_text(yaml.safe_dump(profile, allow_unicode=True), encoding="utf-8")
        scenario = {k: v for k, v in BASE.items() if k != "cost"}  # the roofline cost model reads the profiles
        scenario["cluster"] = {**scenario["cluster"], kind: "custom.yaml"}
        run_and_check(folder, scenario)


SWEEP: dict[str, Any] = {
    "name": "fuzz",
    "base": "s.yaml",
    "set": {"stop.max_requests": 10},
    "axes": [{"path": "workload.tenants.0.arrival.rate_per_s", "name": "rate_per_s", "values": [5.0, 20.0]}],
    "seeds": 1,
    "slo": {"ttft_s": 0.5, "percentile": 90},
}
SWEEP_FIELDS = (
    "name", "base", "set", "set.seed", "set.stop.max_requests", "axes", "axes.0", "axes.0.path", "axes.0.name",
    "axes.0.values", "axes.0.values.0", "axes.0.labels", "axes.0.zip", "seeds", "slo", "slo.ttft_s",
    "slo.percentile", "prices_usd_per_gpu_hour", "prices_usd_per_gpu_hour.H100-SXM", "description",
)  # fmt: skip
PLAN: dict[str, Any] = {
    "name": "fuzz",
    "base": "s.yaml",
    "set": {"stop.max_requests": 10},
    "traffic": {"rate_per_s": 20.0},
    "slo": {"ttft_s": 0.5, "percentile": 90},
    "seeds": 1,
    "replicas": {"min": 1, "max": 4},
    "options": [{"name": "a", "set": {}}],
}
PLAN_FIELDS = (
    "name", "base", "set", "traffic", "traffic.rate_per_s", "slo", "slo.percentile", "slo.tpot_s",
    "min_attainment_frac", "seeds", "replicas", "replicas.min", "replicas.start", "options", "options.0",
    "options.0.name", "options.0.set", "max_rate", "max_rate.tolerance_frac", "max_rate.max_factor",
    "prices_usd_per_gpu_hour", "prices_usd_per_gpu_hour.H100-SXM",
)  # fmt: skip


def _set(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(document))
    node: Any = copy
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return copy


def many_runs(command: str, document: dict[str, Any], path: str, value: Any) -> None:
    """A sweep or plan file with one field fuzzed: exit 0, 1 (a sweep's point failed, the others ran) or
    2 (one line); never a traceback, and no point fails with an internal error."""
    with working_folder() as folder:
        (folder / "s.yaml").write_text(yaml.safe_dump(BASE), encoding="utf-8")
        (folder / "f.yaml").write_text(yaml.safe_dump(_set(document, path, value), allow_unicode=True), "utf-8")
        result = cli(command, "f.yaml", "--out", "out", "--jobs", "1", "--quiet")
        assert "Traceback" not in result.output and "internal error" not in result.output, result.output
        assert_answered(result, (0, 1, 2) if command == "sweep" else (0, 2))
        if result.exit_code == 1:
            assert all(line.startswith("failed: ") for line in result.stderr.splitlines()), result.stderr


def sweep_values(path: str, value: Any) -> None:
    many_runs("sweep", SWEEP, path, value)


def plan_values(path: str, value: Any) -> None:
    many_runs("plan", PLAN, path, value)


CASES: dict[str, tuple[Callable[..., None], dict[str, Any]]] = {
    "sweep_values": (sweep_values, {"path": st.sampled_from(SWEEP_FIELDS), "value": values}),
    "plan_values": (plan_values, {"path": st.sampled_from(PLAN_FIELDS), "value": values}),
    "scenario_values": (scenario_values, {"path": st.sampled_from(FIELDS), "value": values}),
    "set_arguments": (
        set_arguments,
        {"key": st.one_of(st.sampled_from(FIELDS), st.text(max_size=15)), "value": st.text(max_size=30)},
    ),
    "trace_rows": (
        trace_rows,
        {
            "fmt": st.sampled_from(["csv", "azure"]),
            "rows": st.lists(st.lists(cell, min_size=3, max_size=3), max_size=4),
        },
    ),
    "mooncake_records": (
        mooncake_records,
        {
            "records": st.lists(
                st.fixed_dictionaries(
                    {"timestamp": numbers, "input_length": numbers, "output_length": numbers},
                    optional={"hash_ids": st.one_of(st.lists(st.integers(-(2**70), 2**70), max_size=3), values)},
                ).map(lambda r: {k: v for k, v in r.items() if v == v}),  # JSON has no NaN: dropped keys
                max_size=4,
            )
        },
    ),
    "profile_values": (profile_value, {"kind_field": st.sampled_from(profile_fields()), "value": values}),
}


def _call(name: str, **drawn: Any) -> None:
    function, _ = CASES[name]
    if "kind_field" in drawn:
        kind, field = drawn.pop("kind_field")
        drawn = {"kind": kind, "field": field, **drawn}
    function(**drawn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz(name: str) -> None:
    FUZZ(given(**CASES[name][1])(lambda **drawn: _call(name, **drawn)))()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_hunt(name: str) -> None:
    HUNT(given(**CASES[name][1])(lambda **drawn: _call(name, **drawn)))()
