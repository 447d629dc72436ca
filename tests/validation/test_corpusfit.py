"""The corpus fit recovers the efficiency scales that generated its data, and cross-validates by publisher."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from clustersim.architecture import GpuSpec
from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import Cited
from clustersim.validation import corpusfit
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.corpusfit import (
    INTERACTION_PRIOR_WEIGHT,
    PRIOR_WEIGHT,
    FitParam,
    _jacobian,
    atom_scales,
    engines_with,
    fit_rows,
    natural,
    parameters,
    prior_weight,
    reference_engines,
    solver_bounds,
    solver_start,
    within_bounds,
)
from clustersim.validation.crossval import _reset, efficiency_yaml, fit_corpus, migrated
from clustersim.validation.fitcache import fit_key
from clustersim.validation.predict import candidate_root, predict_all
from clustersim.validation.rowscenario import row_scenario
from clustersim.validation.runcorpus import FEW_REQUESTS, RowOutcome, comparisons

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
    """Rows whose published throughput is the simulator's own with ``scales`` on vLLM's Ampere kernels.

    On an A100, which has no measured sustained GEMM rate: on an H100 a compute-bound step at a compute
    scale of 1 runs at the rate the GPU sustains at its power limit (``sustained_s``), which a scale a
    finite-difference step below 1 does not change either, so a fit starting at 1 sees no slope there."""
    rows = [
        dataclasses.replace(BASE, row_id=f"{p}-{i}", publisher=p, prompt_tokens=prompt, output_tokens=output,
                            gpu="A100-80GB")
        for i, (p, prompt, output) in enumerate(SETTINGS)
    ]  # fmt: skip
    params = [FitParam("vllm-v1", kind, "ampere") for kind in scales]
    engines = engines_with(reference_engines(CATALOGUE), params, list(scales.values()))
    root = candidate_root(CATALOGUE.root, engines, tmp_path / "truth")
    built = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    found = predict_all([b.task for b in built], root, None)
    return [dataclasses.replace(r, metrics={"output_tok_per_s": found[r.row_id]["output_tok_per_s"]}) for r in rows]


@pytest.mark.slow
def test_the_fit_recovers_the_scales_that_made_the_data(tmp_path):
    rows = rows_generated_by(TRUE, tmp_path)
    result = fit_corpus(rows, CATALOGUE, jobs=2, max_iterations=12, fold_iterations=12)
    scales = atom_scales(result.params, result.values, "vllm-v1")
    fitted = {kind: scales[("vllm-v1", "ampere", kind)] for kind in TRUE}
    assert fitted["compute"] == pytest.approx(TRUE["compute"], rel=0.05)
    assert fitted["memory"] == pytest.approx(TRUE["memory"], rel=0.05)
    # every row was predicted by a fit that never saw its publisher, and those predictions are close too
    assert {o.row.row_id for o in result.cross_validated} == {r.row_id for r in rows}
    for outcome in result.cross_validated:
        published = outcome.row.metrics["output_tok_per_s"]
        assert math.isclose(outcome.predicted["output_tok_per_s"], published, rel_tol=0.1)


def test_parameters_factor_engine_gpu_family_and_their_interaction():
    rows = [dataclasses.replace(BASE, row_id=f"a-{gpu}", publisher="a", gpu=gpu) for gpu in ("H100-SXM", "A100-80GB")]
    rows.append(dataclasses.replace(BASE, row_id="a-tp2", publisher="a", tp=2, num_gpus=2, load_kind="rate", load=1.0))
    params = parameters(fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE))
    assert [p.label for p in params] == [
        "all.compute.ampere",
        "all.compute.hopper",
        "all.latency.ampere",
        "all.latency.hopper",
        "all.memory.ampere",
        "all.memory.hopper",
        "vllm-v1.comm",
        "vllm-v1.comm_latency",
        "vllm-v1.compute",
        "vllm-v1.compute.ampere",
        "vllm-v1.compute.hopper",
        "vllm-v1.eager",
        "vllm-v1.frontend_latency",
        "vllm-v1.memory",
        "vllm-v1.memory.ampere",
        "vllm-v1.memory.hopper",
    ]  # fmt: skip  (no vllm-v1.frontend: its cited ceiling leaves a fit no work to add, next test)
    weights = {p.label: prior_weight(p) for p in params}
    assert weights["vllm-v1.compute.hopper"] == INTERACTION_PRIOR_WEIGHT > PRIOR_WEIGHT == weights["all.compute.hopper"]
    assert weights["vllm-v1.compute"] == PRIOR_WEIGHT


def test_front_end_work_is_fitted_within_its_measured_ceiling_and_latency_for_every_served_engine():
    served = dataclasses.replace(BASE, row_id="a-rate", publisher="a", load_kind="rate", load=1.0)
    rows = [
        served,
        dataclasses.replace(served, row_id="b-rate", publisher="b", engine="sglang", engine_version="0.5.6"),
    ]
    frows = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    assert CATALOGUE.engine("vllm-v1").frontend_fitted_max_per_request_s.value == 0.0
    assert CATALOGUE.engine("sglang").frontend_fitted_max_per_request_s.value == pytest.approx(0.00733)
    fronts = [p for p in parameters(frows) if p.kind == "frontend"]
    assert [p.label for p in fronts] == ["sglang.frontend"]  # vLLM's cited costs fill its ceiling
    # latency occupies no server: every served engine fits it, within no ceiling
    latencies = [p for p in parameters(frows) if p.kind == "frontend_latency"]
    assert [p.label for p in latencies] == ["sglang.frontend_latency", "vllm-v1.frontend_latency"]
    assert solver_bounds(latencies[1]) == (0.0, corpusfit.FRONTEND_MAX_MS) and prior_weight(latencies[1]) == 0.0
    assert solver_start(latencies[1]) == corpusfit.FRONTEND_START_MS and natural(latencies[1], 20.0) == 0.02
    # streaming work a token: only an engine that cites none (vLLM cites 50 us)
    streams = [p for p in parameters(frows) if p.kind == "frontend_stream"]
    assert [p.label for p in streams] == ["sglang.frontend_stream"]
    assert solver_bounds(streams[0]) == (0.0, corpusfit.STREAM_MAX_MS) and solver_start(streams[0]) == 0.05
    assert natural(streams[0], 0.25) == pytest.approx(0.00025)
    engines = engines_with(
        reference_engines(CATALOGUE), [fronts[0], *latencies, streams[0]], [0.004, 0.02, 0.005, 3e-4]
    )
    assert engines["sglang"].frontend_fitted_per_output_token_s.value == 3e-4
    assert engines["sglang"].frontend_fitted_per_request_s.value == 0.004
    assert engines["sglang"].frontend_fitted_latency_s.value == 0.02
    assert engines["vllm-v1"].frontend_fitted_latency_s.value == 0.005
    assert engines["vllm-v1"].frontend_fitted_per_request_s is None
    assert atom_scales([fronts[0], *latencies], [0.004, 0.02, 0.005], "sglang") == {}  # no scale among them
    assert solver_bounds(fronts[0]) == pytest.approx((0.0, 7.33)) and prior_weight(fronts[0]) == 0.0  # its ceiling
    capped = FitParam("x", "frontend", max_ms=0.5)
    assert capped == FitParam("x", "frontend")  # the ceiling is not part of the parameter's identity
    assert solver_bounds(capped) == (0.0, 0.5) and solver_start(capped) == 0.25  # inside a ceiling under 1 ms
    assert within_bounds(capped, 24.4) == 0.5 and within_bounds(capped, -1.0) == 0.0  # an earlier fit's value
    assert within_bounds(FitParam("x", "compute"), 3.0) == corpusfit.SCALE_BOUND


def test_an_engine_is_predicted_on_a_family_it_was_never_measured_on():
    params = [
        FitParam("sglang", "memory"), FitParam(None, "memory", "cdna3"), FitParam("vllm-v1", "memory"),
        FitParam("vllm-v1", "memory", "cdna3"), FitParam("sglang", "moe"),
    ]  # fmt: skip
    scales = atom_scales(params, [0.9, 0.5, 1.1, 0.8, 0.6], "sglang")
    # SGLang was never measured on CDNA3: its factor times the family's, no interaction
    assert scales[("sglang", "cdna3", "memory")] == pytest.approx(0.45)
    assert scales[("sglang", "hopper", "memory")] == pytest.approx(0.9)  # no family factor there
    assert scales[("sglang", "ampere", "moe")] == 0.6  # engine-wide
    assert atom_scales(params, [0.9, 0.5, 1.1, 0.8, 0.6], "vllm-v1")[("vllm-v1", "cdna3", "memory")] == pytest.approx(
        1.1 * 0.5 * 0.8
    )
    assert atom_scales(params, [0.9, 0.5, 1.1, 0.8, 0.6], "trtllm") == {}  # never fitted: profile untouched


def test_a_gpu_familys_kernel_latency_is_one_factor_shared_by_every_engine_and_scales_every_latency():
    params = [FitParam("sglang", "memory"), FitParam("vllm-v1", "memory"), FitParam(None, "latency", "cdna3")]
    for engine in ("sglang", "vllm-v1"):
        scales = atom_scales(params, [1.0, 1.0, 2.5], engine)
        assert scales[(engine, "cdna3", "latency")] == 2.5 and (engine, "hopper", "latency") not in scales
    engine = engines_with(reference_engines(CATALOGUE), params, [1.0, 1.0, 2.5])["sglang"]
    hardware = CATALOGUE.hardware("MI300X")
    plain = GpuSpec.from_profiles(hardware, reference_engines(CATALOGUE)["sglang"])
    slow = GpuSpec.from_profiles(hardware, engine)
    for name in ("gemm_kernel_latency_s", "elementwise_kernel_latency_s", "decode_attention_latency_s",
                 "prefill_attention_latency_s"):  # fmt: skip
        assert getattr(slow, name) == pytest.approx(2.5 * getattr(plain, name)) and getattr(plain, name) > 0
    assert slow.memory_efficiency_frac == plain.memory_efficiency_frac


def test_eager_launches_are_fitted_for_engines_that_launch_from_python_and_scale_both_times():
    rows = [
        dataclasses.replace(BASE, row_id="a-sglang", publisher="a", engine="sglang"),
        dataclasses.replace(BASE, row_id="a-vllm", publisher="a"),
        dataclasses.replace(BASE, row_id="a-trtllm", publisher="a", engine="trtllm", engine_version="1.0"),
    ]
    found = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    assert [r.eager for r in found] == [True, True, False]  # TensorRT-LLM enqueues from C++: no measured cost
    eager = [p for p in parameters(found) if p.kind == "eager"]
    assert [p.label for p in eager] == ["sglang.eager", "vllm-v1.eager"]
    assert [r.row.row_id for r in found if eager[0].touches_row(r)] == ["a-sglang"]
    # the fitted scale multiplies both measured launch times on every family, uncapped
    engine = engines_with(reference_engines(CATALOGUE), eager[:1], [2.5])["sglang"]
    for gpu in ("H200", "B200", "MI300X"):
        plain = GpuSpec.from_profiles(CATALOGUE.hardware(gpu), reference_engines(CATALOGUE)["sglang"]).engine
        fitted = GpuSpec.from_profiles(CATALOGUE.hardware(gpu), engine).engine
        assert plain.launch_overhead_per_layer_eager_s > 0 and plain.launch_overhead_per_kernel_eager_s > 0
        assert fitted.launch_overhead_per_layer_eager_s == pytest.approx(2.5 * plain.launch_overhead_per_layer_eager_s)
        assert fitted.launch_overhead_per_kernel_eager_s == pytest.approx(
            2.5 * plain.launch_overhead_per_kernel_eager_s
        )
        assert fitted.launch_overhead_per_layer_graph_s == plain.launch_overhead_per_layer_graph_s


def test_block_scaled_fp8_rows_fit_one_engine_wide_scale_on_their_gemms():
    rows = [
        dataclasses.replace(BASE, row_id="a-block", publisher="a", weight_precision="fp8", features=frozenset({"block_fp8"})),
        dataclasses.replace(BASE, row_id="a-tensor", publisher="a", weight_precision="fp8"),
        dataclasses.replace(BASE, row_id="b-deepseek", publisher="b", model="deepseek-ai/DeepSeek-R1", weight_precision="fp8",
                            engine="sglang", engine_version="0.5.6", gpu="H200", tp=8, num_gpus=8),
        dataclasses.replace(BASE, row_id="b-deepseek-fp4", publisher="b", model="nvidia/DeepSeek-R1-FP4",
                            weight_precision="fp4", engine="sglang", engine_version="0.5.6", gpu="B200", tp=8, num_gpus=8),
    ]  # fmt: skip
    found = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    # the row's feature, and DeepSeek's own FP8 checkpoint (its profile's weight_scaling); not its FP4 one
    assert [r.block for r in found] == [True, False, True, False]
    block = [p for p in parameters(found) if p.kind == "block"]
    assert [p.label for p in block] == ["sglang.block", "vllm-v1.block"]
    assert [r.row.row_id for r in found if block[1].touches_row(r)] == ["a-block"]
    engine = engines_with(reference_engines(CATALOGUE), block[1:], [0.5])["vllm-v1"]
    for gpu in ("A100-80GB", "H100-SXM", "B200"):  # written into every family's block
        assert GpuSpec.from_profiles(CATALOGUE.hardware(gpu), engine).block_efficiency_scale == pytest.approx(0.5)


def test_weights_no_tensor_core_take_one_weight_only_scale_per_engine_and_gpu_family():
    rows = [
        dataclasses.replace(BASE, row_id="a-oss-h100", publisher="a", model="openai/gpt-oss-120b", weight_precision="fp4"),
        dataclasses.replace(BASE, row_id="a-oss-h200", publisher="a", model="openai/gpt-oss-120b", weight_precision="fp4",
                            gpu="H200"),
        dataclasses.replace(BASE, row_id="a-oss-a100", publisher="a", model="openai/gpt-oss-120b", weight_precision="fp4",
                            gpu="A100-80GB"),
        dataclasses.replace(BASE, row_id="a-oss-b200", publisher="a", model="openai/gpt-oss-120b", weight_precision="fp4",
                            gpu="B200"),
        dataclasses.replace(BASE, row_id="a-llama", publisher="a"),
    ]  # fmt: skip
    found = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    assert [r.weight_only for r in found] == [True, True, True, False, False]  # the B200 has FP4 tensor cores
    narrow = [p for p in parameters(found) if p.kind == "weight_only"]
    assert [p.label for p in narrow] == ["vllm-v1.weight_only.ampere", "vllm-v1.weight_only.hopper"]
    assert [r.row.row_id for r in found if narrow[0].touches_row(r)] == ["a-oss-a100"]
    assert [r.row.row_id for r in found if narrow[1].touches_row(r)] == ["a-oss-h100", "a-oss-h200"]
    engine = engines_with(reference_engines(CATALOGUE), narrow, [0.6, 0.4])["vllm-v1"]
    cited = {family: rate.value for family, rate in (engine.weight_only_rate_frac or {}).items()}
    for gpu, family, scale in (("A100-80GB", "ampere", 0.6), ("H100-SXM", "hopper", 0.4), ("H200", "hopper", 0.4)):
        # each family's own, times the rate the engine cites for its kernels there
        expected = scale * cited.get(family, 1.0)
        assert GpuSpec.from_profiles(CATALOGUE.hardware(gpu), engine).weight_only_compute_scale == pytest.approx(
            expected
        )


def test_a_scale_now_fitted_per_family_starts_at_the_rate_an_earlier_engine_wide_fit_reached():
    params = [FitParam("vllm-v1", "weight_only", "hopper"), FitParam("vllm-v1", "weight_only", "ampere"),
              FitParam("trtllm", "weight_only", "hopper"), FitParam("vllm-v1", "compute", "hopper")]  # fmt: skip
    engines = reference_engines(CATALOGUE)
    vllm = engines["vllm-v1"].model_copy(
        update={"weight_only_rate_frac": {"hopper": Cited[float](value=0.5, source="a test")}}
    )
    earlier = {"vllm-v1.weight_only": -0.6, "vllm-v1.weight_only.ampere": -0.2, "trtllm.weight_only": -0.7,
               "vllm-v1.compute": -0.3}  # fmt: skip
    found = migrated(earlier, params, {**engines, "vllm-v1": vllm})
    # the earlier rate (e^-0.6) over the cited 0.5: the family starts at the rate the earlier fit reached
    assert found["vllm-v1.weight_only.hopper"] == pytest.approx(-0.6 - math.log(0.5))
    assert found["vllm-v1.weight_only.ampere"] == -0.2  # its own, where the earlier fit had one
    assert found["trtllm.weight_only.hopper"] == -0.7  # no cited rate: the earlier value as it is
    # a family factor of a shared kind is not an engine-wide scale's: it gets no value
    assert "vllm-v1.compute.hopper" not in found
    assert migrated({}, params, engines) == {}


class _ClosedForm:
    """An evaluator whose 'simulation' is a closed form in each row's scales: to check the Jacobian."""

    def __init__(self, rows, params):
        self.rows, self.params = rows, params

    def predict(self, x, only=None, offsets=None):
        values = [natural(p, v) for p, v in zip(self.params, x, strict=True)]
        found = {}
        for r in only if only is not None else self.rows:
            s = atom_scales(self.params, values, r.engine, offsets)
            compute, memory = s[(r.engine, r.family, "compute")], s[(r.engine, r.family, "memory")]
            found[r.row.row_id] = {
                "output_tok_per_s": compute**0.3 * memory**0.7 * (2.0 if r.family == "hopper" else 1)
            }
        return found


def test_the_jacobian_of_a_shared_factor_is_the_sum_over_the_scales_it_multiplies():
    rows = [dataclasses.replace(BASE, row_id=f"a-{gpu}", publisher="a", gpu=gpu) for gpu in ("H100-SXM", "A100-80GB")]
    frows = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    params = parameters(frows)
    ev = _ClosedForm(frows, params)
    x = np.linspace(-0.2, 0.3, len(params))
    active = list(range(len(params)))
    jac = _jacobian(ev, x, active)  # type: ignore[arg-type]
    direct = np.zeros_like(jac)
    r0 = np.log([ev.predict(x)[r.row.row_id]["output_tok_per_s"] for r in frows])
    for col in active:
        moved = x.copy()
        moved[col] += 1e-6
        r1 = np.log([ev.predict(moved)[r.row.row_id]["output_tok_per_s"] for r in frows])
        direct[: len(frows), col] = (r1 - r0) / 1e-6
    np.testing.assert_allclose(jac[: len(frows)], direct[: len(frows)], atol=1e-4)
    assert jac[len(frows) :].diagonal().tolist() == [prior_weight(p) for p in params]


def test_the_efficiency_block_cites_its_fit():
    params = [FitParam("vllm-v1", "compute", "hopper"), FitParam("vllm-v1", "memory", "hopper")]
    engines = engines_with(reference_engines(CATALOGUE), params, [0.7, 0.85])
    scales = engines["vllm-v1"].efficiency["hopper"]
    assert scales.gemm_compute_scale.value == 0.7
    assert scales.prefill_attention_scale is None  # the published FlashAttention speed, not an engine's fit
    assert (scales.gemm_memory_scale.value, scales.decode_attention_scale.value) == (0.85, 0.85)
    from clustersim.validation.crossval import CorpusFit

    params.append(FitParam(None, "compute", "hopper"))
    fit = CorpusFit(params, [0.7, 0.85, 1.2], {p.label: 3 for p in params}, [], [], [])
    text = efficiency_yaml(fit, "vllm-v1", "fit X")
    assert text.startswith("efficiency:\n  hopper:\n    gemm_compute_scale:\n      value: 0.84\n")
    assert 'source: "fit X; vllm-v1.compute.hopper 0.7 (3 rows) x all.compute.hopper 1.2 (3 rows)"' in text
    params += [FitParam("vllm-v1", "frontend"), FitParam("vllm-v1", "frontend_latency")]
    fit = CorpusFit(params, [0.7, 0.85, 1.2, 0.002, 0.015], {p.label: 3 for p in params}, [], [], [])
    text = efficiency_yaml(fit, "vllm-v1", "fit X")
    assert text.startswith(
        'frontend_fitted_per_request_s:\n  value: 0.002\n  source: "fit X; 3 served rows"\n'
        'frontend_fitted_latency_s:\n  value: 0.015\n  source: "fit X; 3 served rows"\nefficiency:\n'
    )


def test_a_bounded_row_is_fitted_at_its_published_rate_and_reported_at_its_bounded_one():
    from types import SimpleNamespace

    from clustersim.validation.corpusfit import _task
    from clustersim.validation.predict import RowTask

    bounded = SimpleNamespace(task=RowTask("r", {}, True, 0, (2000.0, 200.0)))
    assert _task(bounded, search=False).rate_factor == 1.0  # the rate the deployment sustained
    assert _task(bounded, search=True).rate_factor is None  # searched: the highest meeting the bounds
    plain = SimpleNamespace(task=RowTask("p", {}, False))
    assert _task(plain, search=False) is plain.task


def _closed_form_rows(truth: np.ndarray):
    """Two rows (H100, A100) whose published throughput is the closed form at ``truth``."""
    rows = [dataclasses.replace(BASE, row_id=f"a-{gpu}", publisher="a", gpu=gpu) for gpu in ("H100-SXM", "A100-80GB")]
    frows = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    params = parameters(frows)
    made = _ClosedForm(frows, params).predict(truth[: len(params)])
    published = [dataclasses.replace(r.row, metrics={"output_tok_per_s": made[r.row.row_id]["output_tok_per_s"]})
                 for r in frows]  # fmt: skip
    frows = [dataclasses.replace(r, row=p) for r, p in zip(frows, published, strict=True)]
    return frows, params


def _count_jacobians(monkeypatch) -> list[int]:
    """A list that grows by one each time a fit takes a Jacobian."""
    taken: list[int] = []

    def counted(*args):
        taken.append(1)
        return _jacobian(*args)

    monkeypatch.setattr(corpusfit, "_jacobian", counted)
    return taken


def test_a_fit_stops_when_converged_and_reusing_its_jacobian_reaches_the_same_optimum(monkeypatch):
    frows, params = _closed_form_rows(np.full(32, -0.1))
    ev = _ClosedForm(frows, params)
    taken = _count_jacobians(monkeypatch)
    active = list(range(len(params)))
    every_step = corpusfit.fit(ev, np.zeros(len(params)), active, 40)  # type: ignore[arg-type]
    jacobians_every_step = len(taken)
    taken.clear()
    every_third = corpusfit.fit(ev, np.zeros(len(params)), active, 40, None, 3)  # type: ignore[arg-type]
    assert every_step.converged and every_third.converged
    assert every_step.evaluations < 40 and every_third.evaluations < 40
    assert len(taken) <= (every_third.evaluations + 2) // 3 and jacobians_every_step >= 2
    fitted = ev.predict(every_third.x)
    for r in frows:  # the same optimum: the rows' throughputs as the full-Jacobian fit has them
        assert fitted[r.row.row_id]["output_tok_per_s"] == pytest.approx(
            ev.predict(every_step.x)[r.row.row_id]["output_tok_per_s"], rel=0.01
        )
        assert fitted[r.row.row_id]["output_tok_per_s"] == pytest.approx(r.row.metrics["output_tok_per_s"], rel=0.05)


def test_a_fit_at_its_cap_says_it_did_not_converge(monkeypatch):
    frows, params = _closed_form_rows(np.full(32, -0.3))
    ev = _ClosedForm(frows, params)
    taken = _count_jacobians(monkeypatch)
    outcome = corpusfit.fit(ev, np.zeros(len(params)), list(range(len(params))), 2)  # type: ignore[arg-type]
    assert not outcome.converged and outcome.evaluations == 2
    assert len(taken) == 1  # at the start; the one after its last evaluation would never be used
    monkeypatch.setattr(corpusfit, "_jacobian", lambda *args: pytest.fail("a one-evaluation fit took a Jacobian"))
    seen = []
    ev.num_runs = 7  # type: ignore[attr-defined]
    x0 = np.full(len(params), 0.25)
    once = corpusfit.fit(ev, x0, list(range(len(params))), 1, lambda runs, cost: seen.append(cost))  # type: ignore[arg-type]
    assert not once.converged and once.evaluations == 1 and np.array_equal(once.x, x0)  # its start, re-scored
    assert seen == [pytest.approx(float(np.sum(np.abs(corpusfit._vector(ev, x0, list(range(len(params))))))))]


def test_a_fold_restarts_what_its_left_out_rows_touch_from_an_earlier_fold_never_from_the_all_rows_fit():
    rows = [dataclasses.replace(BASE, row_id="a-h100", publisher="a", gpu="H100-SXM"),
            dataclasses.replace(BASE, row_id="b-a100", publisher="b", gpu="A100-80GB")]  # fmt: skip
    frows = fit_rows([row_scenario(r, CATALOGUE) for r in rows], CATALOGUE)
    params = parameters(frows)
    x_all = np.full(len(params), 0.5)
    held = [r for r in frows if r.row.publisher == "a"]
    fresh = _reset(params, x_all, held)
    warm = _reset(params, x_all, held, {"all.compute.hopper": -0.2, "all.compute.ampere": 0.9})
    for param, cold, started in zip(params, fresh, warm, strict=True):
        if not param.touches_row(held[0]):
            assert cold == started == 0.5  # untouched by the left-out rows: the all-rows fit's value
        elif param.label == "all.compute.hopper":
            assert (cold, started) == (solver_start(param), -0.2)  # where the earlier fold without "a" ended
        else:
            assert cold == started == solver_start(param)  # touched, not named by the earlier fold
    assert warm[[p.label for p in params].index("all.compute.ampere")] == 0.5  # b's, not reset for a's fold
    # with the fold's own rows named: what none of them touches (the H100 factors, only a's) stays at its
    # start, whatever an earlier fold left it at; what they touch starts where that fold ended
    train = [r for r in frows if r.row.publisher == "b"]
    earlier = {"all.compute.hopper": -0.2, "vllm-v1.compute": 0.3}
    own = _reset(params, x_all, held, earlier, train)
    for param, value in zip(params, own, strict=True):
        if param.label == "vllm-v1.compute":  # a's and b's: the fold fits it, from the earlier fold's value
            assert value == 0.3
        elif param.touches_row(held[0]):
            assert value == solver_start(param)


def test_a_run_of_few_requests_is_scored_on_its_medians_and_the_fit_uses_the_same_metric():
    metrics = {"output_tok_per_s": 100.0, "ttft_mean_ms": 500.0, "ttft_p50_ms": 200.0, "tpot_mean_ms": 20.0}
    few = dataclasses.replace(BASE, row_id="few", num_requests=10, metrics=metrics)
    many = dataclasses.replace(few, row_id="many", num_requests=FEW_REQUESTS)
    predicted = {"output_tok_per_s": 100.0, "ttft_mean_ms": 200.0, "ttft_p50_ms": 200.0, "tpot_mean_ms": 20.0}
    outcomes = [RowOutcome(r, "simulated", "", predicted, {}) for r in (few, many)]
    scored = {(c.row.row_id, c.metric) for c in comparisons(outcomes) if c.scored}
    assert ("few", "ttft_p50_ms") in scored and ("few", "ttft_mean_ms") not in scored
    assert ("many", "ttft_mean_ms") in scored and ("many", "ttft_p50_ms") not in scored
    assert ("few", "tpot_mean_ms") in scored  # no median published: the mean still scores it
    fit_rows_ = [SimpleNamespace(row=r) for r in (few, many)]
    found = corpusfit.residuals(fit_rows_, {"few": predicted, "many": predicted})  # type: ignore[arg-type]
    assert found.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.0, math.log(200 / 500), 0.0])


def test_a_continued_fit_first_tries_a_step_of_one_log_unit_not_one_as_long_as_its_start(monkeypatch):
    frows, params = _closed_form_rows(np.full(32, -1.0))
    ev = _ClosedForm(frows, params)
    x0 = np.full(len(params), 1.0)  # a fitted start: norm ~3.5 in log units, the optimum 2 per scale away
    tried = []
    vector = corpusfit._vector

    def spied(ev_, x, active):
        tried.append(x.copy())
        return vector(ev_, x, active)

    monkeypatch.setattr(corpusfit, "_vector", spied)
    outcome = corpusfit.fit(ev, x0, list(range(len(params))), 6)  # type: ignore[arg-type]
    assert np.allclose(tried[0], x0)
    # the first trust region is one log unit, stretched by the square root of each offset's distance to
    # its bound (the solver's Coleman-Li scaling: here 1 - (-2) = 3); on the values it was their norm, 3.5
    assert np.linalg.norm(tried[1] - x0) <= math.sqrt(1.0 + corpusfit.SCALE_BOUND) + 1e-9
    assert outcome.evaluations == 6 and not outcome.converged
    start_cost = np.sum(np.abs(vector(ev, x0, list(range(len(params))))))
    assert np.sum(np.abs(vector(ev, outcome.x, list(range(len(params)))))) < start_cost


def test_a_row_run_at_its_knee_fits_throughput_and_tpot_but_not_its_queueing_latencies():
    metrics = {"output_tok_per_s": 100.0, "ttft_mean_ms": 500.0, "tpot_mean_ms": 20.0, "e2e_mean_ms": 3000.0}
    plain = dataclasses.replace(BASE, row_id="plain", load_kind="rate", load=5.0, metrics=metrics)
    bounded = dataclasses.replace(plain, row_id="bounded", p99_bounds_ms=(2000.0, 100.0))
    predicted = {"output_tok_per_s": 90.0, "ttft_mean_ms": 5000.0, "tpot_mean_ms": 25.0, "e2e_mean_ms": 9000.0}
    found = corpusfit.residuals(
        [SimpleNamespace(row=r) for r in (plain, bounded)],  # type: ignore[misc]
        {"plain": predicted, "bounded": predicted},
    )
    both = [math.log(0.9), math.log(25 / 20)]
    assert found.tolist() == pytest.approx([both[0], math.log(10.0), both[1], math.log(3.0), *both])
    outcomes = [RowOutcome(r, "simulated", "", predicted, {}) for r in (plain, bounded)]
    scored = {(c.row.row_id, c.kind) for c in comparisons(outcomes) if c.scored}
    assert ("bounded", "TTFT") in scored and ("bounded", "E2E") in scored  # the tables still score them


def test_a_kept_fits_key_changes_with_the_metrics_a_row_is_fitted_on():
    row = dataclasses.replace(BASE, row_id="a-1", publisher="a", load_kind="concurrency", load=1.0, num_requests=10,
                              metrics={"output_tok_per_s": 1.0, "ttft_mean_ms": 90.0, "ttft_p50_ms": 50.0})  # fmt: skip
    frows = fit_rows([row_scenario(row, CATALOGUE)], CATALOGUE)
    params = parameters(frows)
    many = [dataclasses.replace(frows[0], row=dataclasses.replace(row, num_requests=100))]  # the same task
    # the median scores 10 requests, the mean 100: the same published figures, another fit
    keys = {fit_key("p", rows, params, np.zeros(len(params)), [0], 3, 1) for rows in (frows, many)}
    assert len(keys) == 2


def test_fit_table_writes_front_end_times_in_milliseconds():
    """A front-end term is a time: 0.14 ms must not read as 0.000 beside the scales' three decimals."""
    from clustersim.validation.corpusreport import fit_table

    params = [FitParam("trtllm", "frontend"), FitParam("trtllm", "frontend_latency"), FitParam("trtllm", "compute")]
    table = fit_table(params, [0.000142, 0.00099, 0.88], {p.label: 21 for p in params})
    lines = table.splitlines()
    assert lines[2] == "| trtllm | frontend | all | 0.14 ms | 21 |"
    assert lines[3] == "| trtllm | frontend_latency | all | 0.99 ms | 21 |"
    assert lines[4] == "| trtllm | compute | all | 0.880 | 21 |"
