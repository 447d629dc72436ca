"""The corpus fit recovers the efficiency scales that generated its data, and cross-validates by publisher."""

from __future__ import annotations

import dataclasses
import math

import pytest

from clustersim.config.catalogue import Catalogue
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.corpusfit import FitParam, engines_with, fit_rows, parameters, reference_engines
from clustersim.validation.crossval import efficiency_yaml, fit_corpus
from clustersim.validation.predict import candidate_root, predict_all
from clustersim.validation.rowscenario import row_scenario

CATALOGUE = Catalogue.builtin()
BASE = CorpusRow(
    row_id="", publisher="", source_url="https://example.org", source_where="", source_date="",
    engine="vllm", engine_version="0.10.0", gpu="H100-SXM", num_gpus=1, tp=1, pp=1, ep=1, dp=1,
    model="meta-llama/Llama-3.1-8B-Instruct", weight_precision="bf16", kv_precision=None, dataset="random",
    prompt_tokens=256, output_tokens=256, load_kind="offline", load=None, num_requests=64,
    max_num_seqs=None, max_num_batched_tokens=None, metrics={"output_tok_per_s": 1.0},
)  # fmt: skip
SETTINGS = [  # (publisher, prompt, output): decode-heavy rows pin memory, prefill-heavy ones compute
    ("a", 128, 512),
    ("a", 4096, 8),
    ("b", 256, 256),
    ("b", 8192, 16),
    ("c", 512, 128),
]
TRUE = {"compute": 0.7, "memory": 0.85}


def rows_generated_by(scales: dict[str, float], tmp_path) -> list[CorpusRow]:
    """Rows whose published throughput is the simulator's own with ``scales`` on vLLM's Hopper kernels."""
    rows = [
        dataclasses.replace(BASE, row_id=f"{p}-{i}", publisher=p, prompt_tokens=prompt, output_tokens=output)
        for i, (p, prompt, output) in enumerate(SETTINGS)
    ]
    params = [FitParam("vllm-v1", kind, "hopper") for kind in scales]
    engines = engines_with(reference_engines(CATALOGUE), params, list(scales.values()))
    root = candidate_root(CATALOGUE.root, engines, tmp_path / "truth")
    built = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    found = predict_all([b.task for b in built], root, None)
    return [dataclasses.replace(r, metrics={"output_tok_per_s": found[r.row_id]["output_tok_per_s"]}) for r in rows]


@pytest.mark.slow
def test_the_fit_recovers_the_scales_that_made_the_data(tmp_path):
    rows = rows_generated_by(TRUE, tmp_path)
    result = fit_corpus(rows, CATALOGUE, jobs=2, max_iterations=12, fold_iterations=12)
    fitted = {p.kind: v for p, v in zip(result.params, result.values, strict=True)}
    assert fitted["compute"] == pytest.approx(TRUE["compute"], rel=0.05)
    assert fitted["memory"] == pytest.approx(TRUE["memory"], rel=0.05)
    # every row was predicted by a fit that never saw its publisher, and those predictions are close too
    assert {o.row.row_id for o in result.cross_validated} == {r.row_id for r in rows}
    for outcome in result.cross_validated:
        published = outcome.row.metrics["output_tok_per_s"]
        assert math.isclose(outcome.predicted["output_tok_per_s"], published, rel_tol=0.1)


def test_parameters_are_per_engine_and_gpu_family():
    rows = [dataclasses.replace(BASE, row_id=f"a-{gpu}", publisher="a", gpu=gpu) for gpu in ("H100-SXM", "A100-80GB")]
    built = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    assert [p.label for p in parameters(built)] == [
        "vllm-v1.compute.ampere", "vllm-v1.compute.hopper", "vllm-v1.memory.ampere", "vllm-v1.memory.hopper"
    ]  # fmt: skip


def test_the_efficiency_block_cites_its_fit():
    params = [FitParam("vllm-v1", "compute", "hopper"), FitParam("vllm-v1", "memory", "hopper")]
    engines = engines_with(reference_engines(CATALOGUE), params, [0.7, 0.85])
    scales = engines["vllm-v1"].efficiency["hopper"]
    assert scales.gemm_compute_scale.value == 0.7
    assert scales.prefill_attention_scale is None  # the published FlashAttention speed, not an engine's fit
    assert (scales.gemm_memory_scale.value, scales.decode_attention_scale.value) == (0.85, 0.85)
    from clustersim.validation.crossval import CorpusFit

    text = efficiency_yaml(CorpusFit(params, [0.7, 0.85], {p.label: 3 for p in params}, [], [], []), "vllm-v1", "fit X")
    assert text.startswith("efficiency:\n  hopper:\n    gemm_compute_scale:\n      value: 0.7\n")
    assert 'source: "fit X; 3 rows"' in text
