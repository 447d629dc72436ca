"""The `profiles` and `step` commands print the catalogue and a step's breakdown."""

from __future__ import annotations

from click.testing import CliRunner

from clustersim.architecture import GpuSpec
from clustersim.cli import main
from clustersim.config.catalogue import Catalogue


def test_profiles_lists_every_gpu_model_and_engine():
    result = CliRunner().invoke(main, ["profiles"])
    assert result.exit_code == 0, result.output
    for name in ("H100-SXM", "MI300X", "B200", "DeepSeek-V3", "Mixtral-8x7B", "trtllm", "sglang"):
        assert name in result.output
    assert "Mixtral-8x7B         46.70     12.88" in result.output
    # SGLang sizes its CUDA graphs by the GPU's memory: the most it captures, with the rule in a footnote
    sglang = next(line for line in result.output.splitlines() if line.startswith("sglang "))
    assert "512 seqs*" in sglang and "* the most; by the GPU's memory and TP degree" in result.output


def test_step_prints_breakdown_that_sums_to_the_step():
    args = ["step", "--hardware", "H100-SXM", "--model", "Llama-3.1-70B", "--tp", "4", "--batch", "64"]
    result = CliRunner().invoke(main, [*args, "--context", "2048", "--prefill", "512"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: float(line.split()[1]) for line in result.output.splitlines()[2:]}
    for group in ("linear", "attention_prefill", "attention_decode", "all_reduce", "overhead"):
        assert rows[group] > 0
    assert (
        sum(v for k, v in rows.items() if k != "step") == rows["step"] + 0.0
        or abs(sum(v for k, v in rows.items() if k != "step") - rows["step"]) < 0.01
    )


def test_step_with_unknown_model_is_one_line_error():
    result = CliRunner().invoke(main, ["step", "--hardware", "H100", "--model", "Llama-9"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "--model: unknown model 'Llama-9'" in result.output


def test_step_with_more_stages_than_layers_is_one_line_error():
    result = CliRunner().invoke(main, ["step", "--hardware", "H100", "--model", "Llama-3.1-8B", "--pp", "64"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "--pp: 64 stages for Llama-3.1-8B's 32 layers" in result.output


def test_step_with_pipeline_stages_prices_the_largest_micro_batch_in_flight():
    result = CliRunner().invoke(
        main, ["step", "--hardware", "H100", "--model", "Llama-3.1-70B", "--pp", "2", "--batch", "64"]
    )
    assert result.exit_code == 0
    assert "2 micro-batches in flight" in result.output and "(32 decoding, prefill 0)" in result.output


def test_step_says_when_a_release_changes_nothing():
    """A built-in engine records no kernel releases: an older --engine-version is priced as today's, and
    the command says so instead of printing the same figures as if they were the older release's."""
    args = ["step", "--hardware", "H100", "--model", "Llama-3.1-8B"]
    today = CliRunner().invoke(main, args)
    older = CliRunner().invoke(main, [*args, "--engine-version", "0.4.2"])
    assert today.exit_code == older.exit_code == 0
    assert "note:" not in today.output
    note = "note: engine vllm records no kernel releases on H100-SXM: release 0.4.2's kernels are priced as its current one's"
    assert note in older.output
    assert older.output.splitlines()[-2] == today.output.splitlines()[-1]  # the same step time


def test_step_says_how_much_of_elementwise_is_the_small_kernels_of_moe_and_mla_layers():
    args = ["step", "--hardware", "H100-SXM", "--model", "DeepSeek-V3", "--engine", "sglang", "--tp", "8"]
    deepseek = CliRunner().invoke(main, args)
    assert deepseek.exit_code == 0, deepseek.output
    # SGLang: 6 per FP8 MoE layer (58) and 8 per FP8 MLA block (61), each at an H100's small-kernel latency
    # (3.7 us timed) times the fitted kernel-latency scale SGLang's profile carries for Hopper
    catalogue = Catalogue.builtin()
    each_s = GpuSpec.from_profiles(
        catalogue.hardware("H100-SXM"), catalogue.engine("sglang")
    ).elementwise_kernel_latency_s
    assert each_s > catalogue.hardware("H100-SXM").elementwise_kernel_latency_s.value  # the scale is there
    line = next(x for x in deepseek.output.splitlines() if x.startswith("elementwise includes"))
    assert line.startswith(f"elementwise includes 836 small kernels of MoE and MLA layers ({836 * each_s * 1e3:.3f} ms")
    dense = CliRunner().invoke(main, ["step", "--hardware", "H100-SXM", "--model", "Llama-3.1-8B"])
    assert "small kernels" not in dense.output


def test_step_captures_the_cuda_graphs_the_release_sizes_by_memory():
    """SGLang from 0.5.3 captures graphs up to 512 sequences on a B200 (before: 160), so a decode of 200
    sequences replays a graph there and launches every kernel from Python before."""
    args = ["step", "--hardware", "B200", "--model", "Llama-3.1-8B", "--engine", "sglang", "--batch", "200"]

    def step_ms(*extra: str) -> float:
        result = CliRunner().invoke(main, [*args, *extra])
        assert result.exit_code == 0, result.output
        return float(next(line for line in result.output.splitlines() if line.startswith("step ")).split()[1])

    assert step_ms("--engine-version", "0.5.2") > 1.5 * step_ms("--engine-version", "0.5.6")  # 25.9 and 13.3 ms
