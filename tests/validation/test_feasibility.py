"""Published TTFTs under what any GPU could do are caught before a fit sees them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clustersim.config.catalogue import Catalogue
from clustersim.validation.corpus import CorpusRow, load_corpus
from clustersim.validation.feasibility import first_wave_floor_s, infeasible_ttft

CATALOGUE = Catalogue.builtin()
CORPUS = Path(__file__).resolve().parents[2] / "validation" / "corpus"
ROW = CorpusRow(
    row_id="lab-a", publisher="lab", source_url="https://example.org", source_where="", source_date="",
    engine="sglang", engine_version="0.4.6", gpu="A100-80GB", num_gpus=8, tp=8, pp=1, ep=1, dp=1,
    model="meta-llama/Llama-3.1-70B-Instruct", weight_precision="bf16", kv_precision=None, dataset="random",
    prompt_tokens=4000.0, output_tokens=500.0, load_kind="concurrency", load=64, num_requests=320,
    max_num_seqs=None, max_num_batched_tokens=None, metrics={"output_tok_per_s": 800.0, "ttft_p99_ms": 1900.0},
)  # fmt: skip


def test_the_floor_is_the_first_waves_linear_flops_at_the_datasheet_peak():
    # 64 x 4,000 tokens x 2 x 68.5e9 linear parameters over 8 x 312 TFLOP/s
    assert first_wave_floor_s(ROW, CATALOGUE) == pytest.approx(64 * 4000 * 2 * 68.5e9 / (8 * 312e12), rel=0.01)
    assert first_wave_floor_s(dataclasses.replace(ROW, load_kind="rate", load=5.0), CATALOGUE) is None


def test_a_p99_ttft_far_under_the_floor_is_refused_unless_the_prompts_were_cached():
    assert "first wave of 64 prompts needs 14.0" in infeasible_ttft(ROW, CATALOGUE)
    cached = dataclasses.replace(ROW, features=frozenset({"prefix_cache_hits"}))
    assert infeasible_ttft(cached, CATALOGUE) is None
    assert infeasible_ttft(dataclasses.replace(ROW, metrics={"ttft_p99_ms": 9000.0}), CATALOGUE) is None
    # a wave that is less than the slowest 1% of the requests says nothing about the p99
    assert infeasible_ttft(dataclasses.replace(ROW, num_requests=20_000), CATALOGUE) is None


def test_every_corpus_row_is_feasible_or_marked_cached():
    if not CORPUS.is_dir():
        pytest.skip(f"no corpus at {CORPUS}")
    refused = {row.row_id: why for row in load_corpus(CORPUS) if (why := infeasible_ttft(row, CATALOGUE))}
    assert refused == {}
