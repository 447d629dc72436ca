"""Fuzz the scenario loader: any YAML gives a scenario or one ConfigError line, never another exception."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.config.loader import load_scenario, scenario_from_mapping
from clustersim.errors import ConfigError

BASE: dict[str, Any] = yaml.safe_load((Path(__file__).parents[2] / "scenarios" / "default.yaml").read_text())

KEYS = [
    "name", "seed", "workload", "tenants", "arrival", "kind", "rate_per_s", "cluster", "hardware", "model",
    "scheduler", "policy", "max_num_seqs", "kv", "block_size_tokens", "cost", "stop", "max_requests", "slo",
    "ttft_s", "ordering", "prompt_tokens", "output_tokens", "tokens", "median_tokens", "sigma", "bogus",
]  # fmt: skip
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["poisson", "explicit", "fixed", "unit", "roofline", "static", "H100-SXM", "Llama-3.1-8B"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.sampled_from(KEYS), children, max_size=5)
    ),
    max_leaves=20,
)


def assert_clean(raw: Any) -> None:
    try:
        scenario_from_mapping(raw, "fuzz.yaml")
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("fuzz.yaml") and "\n" not in message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_random_documents(document: Any) -> None:
    if isinstance(document, dict):
        assert_clean(document)


@settings(max_examples=300, deadline=None)
@given(path=st.lists(st.sampled_from([*KEYS, "0"]), min_size=1, max_size=4), value=values)
def test_random_mutations_of_a_valid_scenario(path: list[str], value: Any) -> None:
    raw = copy.deepcopy(BASE)
    node: Any = raw
    for key in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(key, {})
        elif isinstance(node, list) and node:
            node = node[0]
        else:
            return
    if isinstance(node, dict):
        node[path[-1]] = value
    elif isinstance(node, list) and node:
        node[0] = value
    assert_clean(raw)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_random_text_files(tmp_path_factory, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_scenario(path)
    except ConfigError as exc:
        assert "\n" not in str(exc)
