"""Speculative decoding: the expected tokens per verify step, the price of a token, the verify step on
the roofline, and whole runs (the ITL at one user falls by about E; the gain fades with the batch)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import explicit_scenario, read_requests

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import load_scenario, scenario_from_mapping
from clustersim.config.speculative import expected_tokens_per_step
from clustersim.cost import RooflineCostModel, StepBatch, UnitCostModel
from clustersim.cost.base import DecodeStepShape
from clustersim.cost.speculative import SpeculativeCostModel, cycle_shape, scaled
from clustersim.errors import ConfigError
from clustersim.runner import RunResult, run_scenario
from clustersim.runplan import plan_run

Run = Callable[[dict[str, Any]], RunResult]


@pytest.mark.parametrize(
    ("alpha", "k", "expected"),
    [
        (0.0, 3, 1.0),  # every draft rejected: the target's own token only
        (1.0, 3, 4.0),  # every draft accepted: k + 1
        (0.5, 1, 1.5),  # 1 + 0.5
        (0.5, 2, 1.75),  # 1 + 0.5 + 0.25
        (0.8, 3, 2.952),  # 1 + 0.8 + 0.64 + 0.512
        (0.6, 5, (1 - 0.6**6) / 0.4),
    ],
)
def test_expected_tokens_per_verify_step(alpha: float, k: int, expected: float) -> None:
    assert expected_tokens_per_step(alpha, k) == pytest.approx(expected, rel=1e-12)


def test_a_token_costs_the_verify_step_and_the_drafts_shared_by_the_tokens_they_yield() -> None:
    class Target(UnitCostModel):
        def verify_step_shape(self, num_seqs: int, tokens_per_seq: int) -> DecodeStepShape:
            return DecodeStepShape(0.010, ((0.0, 1e-6 * tokens_per_seq, 0.002, 1e-7),))

    draft = UnitCostModel(0.001)
    spec = SpeculativeCostModel(Target(0.05), draft, 3, 2.0)
    shape = spec.decode_step_shape(8)
    # (verify: 10 ms + max(4e-6 C, 2 ms + 1e-7 C)) + 3 x 1 ms, halved
    assert shape.duration_s(1000.0) == pytest.approx((0.010 + max(4e-3, 0.002 + 1e-4) + 0.003) / 2)
    assert spec.step_duration_s(StepBatch(num_decode_seqs=8, decode_context_tokens=1000)) == shape.duration_s(1000.0)
    # a step that carries a prompt chunk is the target's, without speculation, and the draft's pass over it
    mixed = StepBatch((64,), (0,), 8, 1000)
    assert spec.step_duration_s(mixed) == 0.05 + 0.001
    assert SpeculativeCostModel(Target(0.05), None, 3, 2.0).step_duration_s(mixed) == 0.05  # n-gram: no pass


def test_scaling_and_adding_shapes_commute_with_their_durations() -> None:
    verify = DecodeStepShape(0.01, ((0.0, 2e-6, 0.001, 1e-6),), 0.004)
    draft = DecodeStepShape(0.0005, ((0.0, 1e-7, 0.0001, 5e-8),))
    cycle = cycle_shape(verify, draft, 4)
    for context in (0.0, 1e3, 1e6):
        assert cycle.kernels_s(context) == pytest.approx(verify.kernels_s(context) + 4 * draft.kernels_s(context))
        assert scaled(cycle, 0.25).duration_s(context) == pytest.approx(cycle.duration_s(context) / 4)


@pytest.fixture(scope="module")
def llama70b_tp4() -> RooflineCostModel:
    catalogue = Catalogue.builtin()
    model = ModelShape.from_profile(catalogue.model("Llama-3.1-70B"))
    gpu = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm-v1"))
    return RooflineCostModel(model, gpu, 4)


def test_a_verify_step_of_one_token_per_sequence_is_a_decode_step(llama70b_tp4: RooflineCostModel) -> None:
    for n in (1, 7, 256):
        assert llama70b_tp4.verify_step_shape(n, 1) == llama70b_tp4.decode_step_shape(n)


def test_verifying_four_tokens_is_nearly_free_at_one_sequence_and_not_at_256(llama70b_tp4: RooflineCostModel) -> None:
    # one sequence: the step reads every weight once whatever it computes (memory-bound)
    one = llama70b_tp4.verify_step_shape(1, 4).duration_s(1000) / llama70b_tp4.decode_step_shape(1).duration_s(1000)
    assert 1.0 < one < 1.1
    # 256 sequences: 1,024 tokens of GEMMs are compute-bound
    many = llama70b_tp4.verify_step_shape(256, 4).duration_s(256_000)
    assert many / llama70b_tp4.decode_step_shape(256).duration_s(256_000) > 1.8


def spec_scenario(**speculative: Any) -> dict[str, Any]:
    return explicit_scenario([(0.0, 10, 5)], speculative={"kind": "ngram", "num_speculative_tokens": 1, **speculative})


@pytest.mark.parametrize("fast_forward", [True, False])
def test_unit_cost_decode_steps_take_a_token_share_of_a_verify_cycle(run_mapping: Run, fast_forward: bool) -> None:
    # k = 1, alpha = 0.5: E = 1.5 tokens a cycle of 1 s. The prompt's step (1 s) is not speculative;
    # the 4 decode steps take 1 / 1.5 s each: the last token at 1 + 4 x 2/3 s
    raw = spec_scenario(acceptance_rate=0.5)
    raw["simulation"] = {"fast_forward": fast_forward}
    result = run_mapping(raw)
    (request,) = read_requests(result)
    assert request["first_token_at_s"] == 1.0
    assert request["finished_at_s"] == pytest.approx(1.0 + 4 / 1.5, rel=1e-12)
    assert result.summary["speculative"]["tokens_per_verify_step"] == 1.5


@pytest.mark.parametrize(
    ("speculative", "message"),
    [
        ({"kind": "draft_model", "num_speculative_tokens": 3, "acceptance_rate": 0.7}, "needs the draft model"),
        ({"kind": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7, "draft_model": "x"}, "only kind"),
        ({"kind": "eagle", "num_speculative_tokens": 0, "acceptance_rate": 0.7}, "greater than or equal to 1"),
        ({"kind": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 1.5}, "less than or equal to 1"),
        ({"kind": "eagle", "num_speculative_tokens": 3}, "acceptance_rate"),
        ({"kind": "medusa", "num_speculative_tokens": 3, "acceptance_rate": 0.7}, "'draft_model', 'eagle'"),
    ],
)
def test_config_errors(speculative: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        scenario_from_mapping(explicit_scenario([(0.0, 10, 5)], speculative=speculative), "s.yaml")
    assert message in str(caught.value)


SHIPPED = Path(__file__).resolve().parents[2] / "scenarios" / "speculative-decoding.yaml"


def itl_p50_s(tmp_path: Path, name: str, *overrides: str) -> RunResult:
    loaded = load_scenario(SHIPPED, ["stop.max_requests=60", "metrics={}", *overrides])
    return run_scenario(loaded, tmp_path / name)


def test_itl_at_one_user_falls_by_about_e_and_the_gain_fades_with_the_batch(tmp_path: Path) -> None:
    # n-gram lookup drafts on the host: the only price of speculation is the verify step's extra tokens
    ngram = "speculative={kind: ngram, num_speculative_tokens: 3, acceptance_rate: 0.8}"
    e = expected_tokens_per_step(0.8, 3)
    ratios = {}
    for users in (1, 64):
        base = itl_p50_s(tmp_path, f"base{users}", "speculative=null", f"workload.tenants.0.arrival.num_users={users}")
        spec = itl_p50_s(tmp_path, f"spec{users}", ngram, f"workload.tenants.0.arrival.num_users={users}")
        ratios[users] = base.summary["itl_s"]["p50"] / spec.summary["itl_s"]["p50"]
    assert 0.93 * e < ratios[1] <= e  # one sequence: verifying 4 tokens costs hardly more than decoding 1
    assert ratios[64] < ratios[1] - 0.3  # a batch of 64 makes the verify step compute-heavier


def test_a_draft_models_weights_and_kv_cache_take_memory_from_the_targets(tmp_path: Path) -> None:
    draft = (
        "speculative={kind: draft_model, draft_model: Llama-3.1-8B, num_speculative_tokens: 3, acceptance_rate: 0.7}"
    )
    with_draft = itl_p50_s(tmp_path, "draft", draft, "stop.max_requests=5")
    without = itl_p50_s(tmp_path, "none", "speculative=null", "stop.max_requests=5")
    assert with_draft.summary["kv_blocks_per_replica"][0] < 0.85 * without.summary["kv_blocks_per_replica"][0]


def test_a_draft_model_must_share_the_targets_vocabulary() -> None:
    bad = "speculative={kind: draft_model, draft_model: Llama-2-7B, num_speculative_tokens: 3, acceptance_rate: 0.7}"
    with pytest.raises(ConfigError) as caught:
        plan_run(load_scenario(SHIPPED, [bad]))
    assert "vocabulary" in str(caught.value) and "speculative.draft_model" in str(caught.value)
