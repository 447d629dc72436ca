"""Sliding-window attention layers: their attention work, their KV cache per engine, and their profile fields."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clustersim.architecture import GpuSpec, ModelShape, kv_bytes_per_token_per_gpu
from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import ModelProfile
from clustersim.cost import RooflineCostModel, StepBatch
from clustersim.cost.ops import decode_attention_work, prefill_attention_work

FULL = ModelShape(
    name="toy",
    num_layers=4,
    hidden_size=64,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=100,
    gated_mlp=True,
    tied_embeddings=False,
    max_model_len_tokens=100_000,
    weight_bytes_per_param=2,
    kv_bytes_per_element=2,
)
WINDOWED = replace(FULL, sliding_window_tokens=8, num_sliding_window_layers=2)  # half the layers see 8 keys


def _pairs_by_hand(prior: int, new: int, window: int | None) -> int:
    """Query-key pairs of one chunk, counted one query at a time."""
    return sum(min(q, window) if window else q for q in range(prior + 1, prior + new + 1))


@given(st.integers(0, 60), st.integers(1, 60))
def test_prefill_pairs_are_the_mean_of_full_and_window_layers(prior, new):
    pair_flops = 4.0 * FULL.num_attention_heads * FULL.head_dim
    full = prefill_attention_work((new,), (prior,), FULL, 1).flops
    windowed = prefill_attention_work((new,), (prior,), WINDOWED, 1).flops
    assert full == pytest.approx(pair_flops * _pairs_by_hand(prior, new, None))
    expected = (_pairs_by_hand(prior, new, None) + _pairs_by_hand(prior, new, 8)) / 2
    assert windowed == pytest.approx(pair_flops * expected)


def test_prefill_in_a_window_reads_at_most_the_window_of_prior_keys():
    full = prefill_attention_work((10,), (1000,), FULL, 1)
    windowed = prefill_attention_work((10,), (1000,), WINDOWED, 1)
    kv_per_token = 2 * FULL.num_kv_heads * FULL.head_dim * 2
    qo = 10 * 2 * FULL.num_attention_heads * FULL.head_dim * 2
    assert full.bytes == 1010 * kv_per_token + qo
    assert windowed.bytes == pytest.approx(((1010 + 18) * kv_per_token) / 2 + qo)


def test_decode_in_a_window_reads_the_window_of_every_sequence():
    """A window layer charges each sequence its window (even one shorter than it): affine in the context."""
    full = decode_attention_work(3, 3000, FULL, 1)
    windowed = decode_attention_work(3, 3000, WINDOWED, 1)
    assert windowed.flops == pytest.approx(full.flops * (3000 + 3 * 8) / 2 / 3000)
    short = decode_attention_work(3, 6, WINDOWED, 1)  # two tokens each: still charged the window of 8
    assert short.flops == pytest.approx(decode_attention_work(3, (6 + 24) / 2, FULL, 1).flops)


def test_a_model_without_windows_prices_as_before():
    assert WINDOWED.decode_attended_tokens(5, 500) != 500
    assert FULL.decode_attended_tokens(5, 500) == 500
    assert prefill_attention_work((7, 9), (3, 0), FULL, 1) == prefill_attention_work(
        (7, 9), (3, 0), replace(FULL, sliding_window_tokens=8), 1
    )  # a window on no layer changes nothing


@pytest.mark.parametrize(("share", "layers"), [(1.0, 4.0), (0.8, 3.6), (0.0, 2.0)])
def test_kv_per_token_counts_window_layers_at_the_engines_share(share, layers):
    model = WINDOWED.with_sliding_window_kv_share(share)
    per_layer = 2 * FULL.num_kv_heads * FULL.head_dim * 2
    assert kv_bytes_per_token_per_gpu(model, 1) == pytest.approx(layers * per_layer)
    assert model.kv_bytes_per_token() == pytest.approx(layers * per_layer)
    assert FULL.with_sliding_window_kv_share(share) == FULL  # no window layer: nothing to share


@pytest.mark.parametrize(("engine", "share"), [("vllm", 0.0), ("sglang", 0.8), ("trtllm", 1.0)])
def test_engines_keep_their_own_share_of_the_window_layers_kv(engine, share):
    catalogue = Catalogue.builtin()
    gpu = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine(engine))
    assert gpu.engine.sliding_window_kv_share == share
    model = ModelShape.from_profile(catalogue.model("gpt-oss-20b"))
    assert (model.num_sliding_window_layers, model.sliding_window_tokens) == (12, 128)
    shared = model.with_sliding_window_kv_share(share)
    assert shared.kv_bytes_per_token() == pytest.approx(model.kv_bytes_per_token() * (12 + 12 * share) / 24)


@pytest.mark.parametrize("num_seqs", [1, 9, 200])
@pytest.mark.parametrize("context_per_seq", [0, 50, 128, 4000])
def test_gpt_oss_decode_step_shape_matches_the_step_price(num_seqs, context_per_seq):
    catalogue = Catalogue.builtin()
    model = ModelShape.from_profile(catalogue.model("gpt-oss-20b"))
    cost = RooflineCostModel(model, GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm")), 1)
    context = num_seqs * context_per_seq
    direct = cost.step_duration_s(StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context))
    assert cost.decode_step_shape(num_seqs).duration_s(context) == pytest.approx(direct, rel=1e-12)


def _profile(**fields: object) -> dict[str, object]:
    raw = Catalogue.builtin().model("gpt-oss-20b").model_dump()
    raw.update(fields)
    return raw


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_sliding_window_layers": None}, "go together"),
        ({"sliding_window_tokens": {"value": 0, "source": "a test"}}, "sliding_window_tokens"),
        ({"num_sliding_window_layers": {"value": 25, "source": "a test"}}, r"within 1\.\.num_layers \(24\)"),
    ],
)
def test_a_profile_with_a_wrong_window_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        ModelProfile.model_validate(_profile(**fields))
