"""Published TTFTs under what any GPU could do are caught before a fit sees them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clustersim.config.catalogue import Catalogue
from clustersim.validation.corpus import CorpusRow, load_corpus
from clustersim.validation.feasibility import first_wave_floor_s, infeasible_ttft, known_wave_floor_s
from clustersim.validation.rowscenario import sglang_random_lengths

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


def test_known_prompt_lengths_give_an_exact_floor_for_the_p99():
    row = dataclasses.replace(ROW, dataset="sglang-random-8000-1000", load=16, num_requests=80,
                              metrics={"ttft_p99_ms": 2600.0})  # fmt: skip
    _first, *rest = sglang_random_lengths(8000, 1000, 80, False)[0][:16]
    wave = sorted([0, *rest])  # the warm-up request sent request 0's prompt just before: all of it is cached
    floor_s, counted = known_wave_floor_s(row, CATALOGUE)
    # numpy's p99 of 80 values is at least the second largest, which waits for the 15 shortest of the wave
    assert counted == 15 and floor_s == pytest.approx(sum(wave[:15]) * 2 * 68.5e9 / (8 * 312e12), rel=0.01)
    assert "the 15 shortest prompts of its first wave need 2.96 s" in infeasible_ttft(row, CATALOGUE)
    assert infeasible_ttft(dataclasses.replace(row, metrics={"ttft_p99_ms": 3300.0}), CATALOGUE) is None
    # 500 requests: the p99 is the sixth largest, which the 16-prompt wave bounds by its 11 shortest
    many = dataclasses.replace(row, num_requests=500)
    assert known_wave_floor_s(many, CATALOGUE)[1] == 11
    # a wave smaller than the ranks above the p99 bounds nothing
    assert known_wave_floor_s(dataclasses.replace(row, load=4, num_requests=2000), CATALOGUE) is None


def test_prompts_an_earlier_run_sent_lower_the_floor():
    """The page's one-client run sent the same first 10 documents (at 8,000 nominal tokens: the same
    prompts): only the wave's other six are prefilled, and a p99 of 2.6 s is no longer impossible."""
    row = dataclasses.replace(ROW, dataset="sglang-random-8000-1000", load=16, num_requests=80,
                              metrics={"ttft_p99_ms": 2600.0})  # fmt: skip
    warm = dataclasses.replace(row, earlier_runs=((8000, 1000, 10),))
    wave = sglang_random_lengths(8000, 1000, 80, False)[0][:16]
    floor_s, counted = known_wave_floor_s(warm, CATALOGUE)
    assert counted == 15 and floor_s == pytest.approx(sum(sorted(wave[10:])[:5]) * 2 * 68.5e9 / (8 * 312e12), rel=0.01)
    assert infeasible_ttft(warm, CATALOGUE) is None
    # a shorter earlier cut of the same documents (1,000 nominal tokens) covers only its own length
    chat = dataclasses.replace(row, earlier_runs=((1000, 1000, 10),))
    shorter = sglang_random_lengths(1000, 1000, 10, False)[0]
    uncached = sorted([0] + [p - min(p, c) for p, c in zip(wave[1:10], shorter[1:], strict=True)] + wave[10:])
    assert known_wave_floor_s(chat, CATALOGUE)[0] == pytest.approx(sum(uncached[:15]) * 2 * 68.5e9 / (8 * 312e12),
                                                                   rel=0.01)  # fmt: skip
