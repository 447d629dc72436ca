"""Kernel tables measured in this repository (validation/kernels): loading, and the shapes they cover."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

KERNELS = REPO / "validation" / "kernels"


def test_measured_table_names_its_gpu_and_keeps_each_shapes_fastest_kernel(tmp_path: Path):
    from clustersim.validation.kernels import measured_samples

    header = "kernel,backend,m_tokens,k,n,batch,q_len,kv_len,q_heads,kv_heads,head_dim,causal,flops,bytes,median_s\n"
    rows = [
        "gemm_bf16,cublas,64,4096,4096,,,,,,,,,,2.0e-5",
        "attn_prefill,flash,,,,1,1024,4096,8,1,128,0,,,3.0e-5",
        "attn_prefill,cudnn,,,,1,1024,4096,8,1,128,0,,,2.0e-5",
        "attn_decode,flash,,,,32,1,2048,32,8,128,0,,,4.0e-5",
    ]
    (tmp_path / "x.csv").write_text(header + "\n".join(rows) + "\n")
    (tmp_path / "x.environment.json").write_text('{"device": "NVIDIA H200"}')
    found = measured_samples(tmp_path / "x.csv")
    assert {s.gpu for s in found} == {"H200"}
    prefill = [s for s in found if s.group == "attention_prefill"]
    assert len(prefill) == 1 and prefill[0].measured_s == 2.0e-5
    # 1024 queries over all 4096 keys, each pair 2 x 2 x 128 FLOPs per head, 8 heads (within half a key per query)
    assert prefill[0].work.flops == pytest.approx(4 * 128 * 8 * 1024 * 4096, rel=1e-3)
    decode = next(s for s in found if s.group == "attention_decode")
    assert decode.num_seqs == 32


def test_measured_table_with_an_unknown_gpu_or_no_environment_is_a_config_error(tmp_path: Path):
    from clustersim.errors import ConfigError
    from clustersim.validation.kernels import measured_samples

    (tmp_path / "x.csv").write_text("kernel,median_s\n")
    with pytest.raises(ConfigError, match=r"environment\.json"):
        measured_samples(tmp_path / "x.csv")
    (tmp_path / "x.environment.json").write_text('{"device": "Some GPU"}')
    with pytest.raises(ConfigError, match="Some GPU"):
        measured_samples(tmp_path / "x.csv")


def test_gemm_shapes_file_is_what_the_measuring_script_derives_from_the_catalogue():
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("measure_kernels", REPO / "scripts" / "measure_kernels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shapes = module.gemm_shapes()
    assert json.loads((KERNELS / "gemm_shapes.json").read_text()) == shapes
    assert "8192x1280" in shapes  # Llama-3.1-70B's QKV projection at TP 8


def test_measured_table_with_a_non_number_names_its_column_and_line(tmp_path: Path):
    from clustersim.errors import ConfigError
    from clustersim.validation.kernels import measured_samples

    header = "kernel,backend,m_tokens,k,n,batch,q_len,kv_len,q_heads,kv_heads,head_dim,causal,flops,bytes,median_s\n"
    good = "gemm_bf16,cublas,64,4096,4096,,,,,,,,,,2.0e-5\n"
    (tmp_path / "x.csv").write_text(header + good + "gemm_bf16,cublas,abc,4096,4096,,,,,,,,,,2.0e-5\n")
    (tmp_path / "x.environment.json").write_text('{"device": "NVIDIA H200"}')
    with pytest.raises(ConfigError, match=r"m_tokens: line 3: 'abc' is not a number"):
        measured_samples(tmp_path / "x.csv")


def test_missing_kernels_folder_is_one_line_error(tmp_path: Path):
    from click.testing import CliRunner

    from clustersim.cli import main

    result = CliRunner().invoke(main, ["validate-cost", str(tmp_path), "--kernels", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such folder" in result.output


def test_sustained_rates_are_the_median_once_the_power_limit_holds(tmp_path: Path):
    from clustersim.validation.sustained import format_sustained, load_sustained

    (tmp_path / "sustained").mkdir()
    (tmp_path / "x.environment.json").write_text('{"device": "NVIDIA H200"}')
    rows = ["phase,t_s,window_s,launches,work_per_s"]
    rows += [f"gemm_bf16,{t / 4:.2f},0.25,16,{(800 if t < 8 else 700) * 1e12}" for t in range(60)]  # 15 s
    rows += ["gemm_fp8,15.0,0.25,16,1.4e15", "gemm_fp8,26.0,0.25,16,1.3e15"]
    (tmp_path / "sustained" / "x.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "sustained" / "x-nvidia-smi.csv").write_text("t_s,clocks.sm\n0.0,1980\n")  # the clock log: skipped
    bf16, fp8 = load_sustained(tmp_path)
    assert (bf16.gpu, bf16.phase, bf16.first_per_s, bf16.settled_per_s) == ("H200", "gemm_bf16", 800e12, 700e12)
    assert (fp8.first_per_s, fp8.settled_per_s) == (1.4e15, 1.3e15)  # times from the phase's own start
    assert "H200       gemm_bf16       800.0    700.0  0.875" in format_sustained([bf16, fp8])
    assert load_sustained(tmp_path / "sustained") == []  # no sustained/ folder: nothing


def test_a_sustained_table_too_short_to_settle_is_a_config_error(tmp_path: Path):
    from clustersim.errors import ConfigError
    from clustersim.validation.sustained import sustained_rates

    path = tmp_path / "x.csv"
    path.write_text("phase,t_s,window_s,launches,work_per_s\ngemm_bf16,0.3,0.25,16,7e14\ngemm_bf16,5.0,0.25,16,7e14\n")
    with pytest.raises(ConfigError, match="phase gemm_bf16 ran under 10 s"):
        sustained_rates(path, "H200")
    path.write_text("phase,t_s\ngemm_bf16,0.3\n")
    with pytest.raises(ConfigError, match="work_per_s: missing column"):
        sustained_rates(path, "H200")


def test_the_shipped_sustained_tables_give_the_profiles_power_limited_rates():
    from clustersim.config.catalogue import Catalogue
    from clustersim.validation.sustained import load_sustained

    catalogue = Catalogue.builtin()
    for rate in load_sustained(KERNELS):
        if not rate.phase.startswith("gemm_"):
            continue
        field = "sustained_fp8_flops_per_s" if rate.phase == "gemm_fp8" else "sustained_bf16_flops_per_s"
        assert getattr(catalogue.hardware(rate.gpu), field).value == pytest.approx(rate.settled_per_s, rel=1e-4)
