"""Pipeline parallelism with a micro-batch per stage in flight (clustersim.cost.pipeline)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.cost import RooflineCostModel, StepBatch, UnitCostModel
from clustersim.cost.pipeline import PipelinedCostModel, largest_micro_batch


def _llama70b(pp: int) -> RooflineCostModel:
    catalogue = Catalogue.builtin()
    shape = ModelShape.from_profile(catalogue.model("Llama-3.1-70B"))
    gpu = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm"))
    return RooflineCostModel(shape, gpu, 1, pp)


def test_one_stage_or_one_sequence_is_the_batch_itself():
    batch = StepBatch((300, 20), (0, 100), 5, 5000)
    assert largest_micro_batch(batch, 1) is batch
    lone = StepBatch((4096,), (0,))
    assert largest_micro_batch(lone, 4) is lone  # a request is in one micro-batch: no split


def test_decodes_split_evenly_with_their_share_of_the_context():
    micro = largest_micro_batch(StepBatch(num_decode_seqs=7, decode_context_tokens=7000), 2)
    assert (micro.num_decode_seqs, micro.decode_context_tokens) == (4, 4000)
    micro = largest_micro_batch(StepBatch(num_decode_seqs=3, decode_context_tokens=300), 8)  # 3 micro-batches
    assert (micro.num_decode_seqs, micro.decode_context_tokens) == (1, 100)


def test_chunks_stay_whole_and_go_to_the_lightest_micro_batch():
    # 400 to the first, 100 then 50 to the second (150); decodes 6 and 5, the lighter taking one more
    batch = StepBatch((100, 50, 400), (0, 0, 7), 11, 1100)
    micro = largest_micro_batch(batch, 2)
    assert micro.prefill_new_tokens == (400,) and micro.prefill_context_tokens == (7,)
    assert micro.num_decode_seqs == 5 and micro.decode_context_tokens == pytest.approx(500)


@given(
    chunks=st.lists(st.integers(1, 5000), max_size=6),
    num_decode=st.integers(0, 300),
    stages=st.integers(1, 8),
)
def test_the_largest_micro_batch_is_a_fair_share_at_least_and_never_more_than_the_batch(chunks, num_decode, stages):
    batch = StepBatch(tuple(chunks), tuple([0] * len(chunks)), num_decode, num_decode * 10)
    if batch.num_seqs == 0:
        return
    micro = largest_micro_batch(batch, stages)
    m = min(stages, batch.num_seqs)
    assert micro.num_tokens * m >= batch.num_tokens  # the largest holds at least the mean
    assert micro.num_tokens <= batch.num_tokens
    assert micro.num_decode_seqs == -(-num_decode // m) or micro.num_decode_seqs == num_decode // m
    assert set(micro.prefill_new_tokens) <= set(chunks)


def test_a_full_pipeline_runs_prompts_on_every_stage_at_once():
    """Compute-bound: two micro-batches of two 4,096-token prompts each cross the two stages in about
    the time one batch of all four takes on one stage: about half the trip of one batch in flight."""
    latency = _llama70b(2)  # one batch in flight
    pipelined = PipelinedCostModel(latency, 2)
    four = StepBatch((4096,) * 4, (0,) * 4)
    assert pipelined.step_duration_s(four) == latency.step_duration_s(StepBatch((4096,) * 2, (0,) * 2))
    assert pipelined.step_duration_s(four) == pytest.approx(0.5 * latency.step_duration_s(four), rel=0.05)


def test_decode_gains_only_with_more_sequences_in_flight():
    """Memory-bound: each micro-batch reads its stage's weights, so 64 sequences in two micro-batches
    cost about what one batch of 64 does, and 128 (64 a micro-batch) hardly more: twice the tokens."""
    latency = _llama70b(2)
    pipelined = PipelinedCostModel(latency, 2)
    one_batch_s = latency.step_duration_s(StepBatch(num_decode_seqs=64, decode_context_tokens=64 * 1000))
    split_s = pipelined.step_duration_s(StepBatch(num_decode_seqs=64, decode_context_tokens=64 * 1000))
    doubled_s = pipelined.step_duration_s(StepBatch(num_decode_seqs=128, decode_context_tokens=128 * 1000))
    assert split_s == pytest.approx(one_batch_s, rel=0.1)
    assert doubled_s == pytest.approx(one_batch_s, rel=1e-12)
    assert pipelined.decode_step_shape(128).duration_s(128 * 1000) == pytest.approx(doubled_s, rel=1e-12)


def test_a_lone_prompt_crosses_every_stage():
    """One sequence cannot be in two micro-batches: its prompt pays the whole trip (the TTFT of a lone request)."""
    latency = _llama70b(4)
    prompt = StepBatch((2048,), (0,))
    assert PipelinedCostModel(latency, 4).step_duration_s(prompt) == latency.step_duration_s(prompt)


def test_verify_steps_split_like_decodes():
    latency = _llama70b(2)
    pipelined = PipelinedCostModel(latency, 2)
    assert pipelined.verify_step_shape(64, 4).duration_s(64_000) == pytest.approx(
        latency.verify_step_shape(32, 4).duration_s(32_000), rel=1e-12
    )
    assert PipelinedCostModel(UnitCostModel(2.0), 4).verify_step_shape(9, 3).duration_s(0.0) == 2.0
