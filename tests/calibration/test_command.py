"""``clustersim calibrate`` end to end on a tiny CSV: the printout, the profile files, a scenario that
uses them, and one-line refusals with exit 2."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from clustersim.cli import main
from clustersim.config.catalogue import Catalogue, load_profile_file
from clustersim.config.loader import load_scenario
from clustersim.config.profiles import EngineProfile, HardwareProfile
from clustersim.runplan import plan_run

DATA = """\
# a tiny benchmark of our own (made-up numbers)
hardware,model,tensor_parallel,weight_precision,load_kind,load,prompt_tokens,output_tokens,ttft_s,itl_s,output_tokens_per_s
H100-SXM,Llama-3.1-8B,1,,batch,1,128,8,0.020,0.0080,
H100-SXM,Llama-3.1-8B,1,,batch,16,64,8,,0.0095,1500
H100-SXM,Llama-3.1-8B,1,,concurrency,4,256,8,0.030,,
"""
SCENARIO = """\
name: uses-calibrated
workload:
  tenants:
    - name: t
      arrival: {kind: poisson, rate_per_s: 5.0}
      prompt_tokens: {kind: fixed, tokens: 64}
      output_tokens: {kind: fixed, tokens: 8}
stop: {max_requests: 10}
cluster: {hardware: HARDWARE, model: Llama-3.1-8B, engine: my-engine.yaml}
"""
VLLM = Catalogue.builtin().engine("vllm-v0.6")


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module", name="calibrated")
def calibrated_fixture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result]:
    folder = tmp_path_factory.mktemp("calibrate")
    (folder / "data.csv").write_text(DATA, encoding="utf-8")
    old = Path.cwd()
    os.chdir(folder)
    try:
        result = cli(
            "calibrate", "data.csv", "--engine", "vllm-v0.6", "--out", "profiles/my-engine.yaml", "--train-rows", "0,1"
        )
    finally:
        os.chdir(old)
    return folder, result


def test_prints_rows_and_errors(calibrated: tuple[Path, Result]) -> None:
    _, result = calibrated
    assert result.exit_code == 0, result.output
    out = result.output
    assert "calibrated engine 'vllm-v0.6' on data.csv (sha256" in out and "fitted on 2 of 3 rows (0, 1)" in out
    assert "step_overhead_s" in out and "per_seq_overhead_s" in out
    row_lines = [line for line in out.splitlines() if line.lstrip()[:1].isdigit() and " H100-SXM " in line]
    assert len(row_lines) == 5  # one per measured value
    assert sum(" test " in line for line in row_lines) == 1
    for label in ("base (fit rows)", "in-sample", "leave-one-out", "base (test rows)", "held out", "overall"):
        assert label in out
    assert "wrote profiles/my-engine.yaml" in out


def test_written_profile_keeps_the_base_and_cites_the_data(calibrated: tuple[Path, Result]) -> None:
    folder, _ = calibrated
    engine = load_profile_file(folder / "profiles" / "my-engine.yaml", EngineProfile)
    assert engine.name == "my-engine" and engine.aliases == ()
    for field in ("launch_overhead_per_layer_eager_s", "cuda_graph_max_seqs", "sampling_per_seq_s"):
        assert getattr(engine, field) == getattr(VLLM, field)  # value and source
    sha = hashlib.sha256((folder / "data.csv").read_bytes()).hexdigest()[:12]
    for field in ("step_overhead_s", "per_seq_overhead_s"):
        source = getattr(engine, field).source
        assert f"fitted by `clustersim calibrate` on data.csv (sha256 {sha}), 2 of its 3 rows" in source
        assert "in-sample MAPE" in source and "leave-one-out MAPE" in source and "held out MAPE" in source
    assert engine.step_overhead_s.value != VLLM.step_overhead_s.value
    text = (folder / "profiles" / "my-engine.yaml").read_text(encoding="utf-8")
    assert text.startswith("# my-engine: engine profile calibrated on measurements.")


def test_a_scenario_runs_with_the_written_profile(calibrated: tuple[Path, Result]) -> None:
    folder, _ = calibrated
    scenario = folder / "profiles" / "scenario.yaml"
    scenario.write_text(SCENARIO.replace("HARDWARE", "H100-SXM"), encoding="utf-8")
    engine = load_profile_file(folder / "profiles" / "my-engine.yaml", EngineProfile)
    plan = plan_run(load_scenario(scenario))
    assert plan.groups[0].gpu.step_overhead_s == engine.step_overhead_s.value
    result = cli("run", str(scenario), "--out", str(folder / "run"))
    assert result.exit_code == 0, result.output
    assert "10 arrived, 10 completed" in result.output


def test_a_written_profile_can_be_the_base_of_another(calibrated: tuple[Path, Result]) -> None:
    folder, _ = calibrated
    base = folder / "profiles" / "my-engine.yaml"
    again = folder / "again.yaml"
    result = cli("calibrate", str(folder / "data.csv"), "--engine", str(base), "--out", str(again),
                 "--fit", "sampling_per_seq_s", "--train-rows", "0")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "calibrated engine 'my-engine'" in result.output
    first, second = load_profile_file(base, EngineProfile), load_profile_file(again, EngineProfile)
    assert second.step_overhead_s == first.step_overhead_s  # the first calibration's value and source, kept
    assert "fitted by `clustersim calibrate`" in second.sampling_per_seq_s.source  # type: ignore[union-attr]


def test_fit_gpu_writes_a_hardware_profile_beside_the_engine(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text(DATA, encoding="utf-8")
    out = tmp_path / "my-engine.yaml"
    result = cli("calibrate", str(tmp_path / "data.csv"), "--engine", "vllm-v0.6", "--out", str(out), "--fit-gpu",
                 "--fit", "step_overhead_s", "--train-frac", "0.33", "--seed", "5")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "fitted on 1 of 3 rows (1)" in result.output  # the seeded third
    assert "H100-SXM.compute_efficiency_frac" in result.output and "H100-SXM.memory_efficiency_frac" in result.output
    gpu_path = tmp_path / "my-engine-h100-sxm.yaml"
    assert f"wrote {gpu_path}" in result.output
    gpu = load_profile_file(gpu_path, HardwareProfile)
    builtin = Catalogue.builtin().hardware("H100-SXM")
    assert gpu.name == "H100-SXM (my-engine)" and gpu.hbm_bandwidth_bytes_per_s == builtin.hbm_bandwidth_bytes_per_s
    assert "fitted by `clustersim calibrate`" in gpu.compute_efficiency_frac.source
    assert 0 < gpu.memory_efficiency_frac.value <= 1
    engine = load_profile_file(out, EngineProfile)
    assert engine.per_seq_overhead_s == Catalogue.builtin().engine("vllm-v0.6").per_seq_overhead_s  # not fitted
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO.replace("HARDWARE", gpu_path.name), encoding="utf-8")
    plan = plan_run(load_scenario(scenario))
    assert plan.groups[0].gpu.memory_efficiency_frac == gpu.memory_efficiency_frac.value


def test_doc_block_is_written(calibrated: tuple[Path, Result], tmp_path: Path) -> None:
    folder, _ = calibrated
    doc = tmp_path / "page.md"
    doc.write_text("# Page\n\n<!-- BEGIN calibrate -->\nold\n<!-- END calibrate -->\n", encoding="utf-8")
    one_row = folder / "one.csv"
    one_row.write_text("\n".join(DATA.splitlines()[:3]) + "\n", encoding="utf-8")
    result = cli("calibrate", str(one_row), "--engine", "vllm-v0.6", "--out", str(tmp_path / "e.yaml"), "--fit",
                 "step_overhead_s", "--doc", f"{doc}#calibrate")  # fmt: skip
    assert result.exit_code == 0, result.output
    text = doc.read_text(encoding="utf-8")
    assert (
        "old" not in text
        and "```text\ncalibrated engine 'vllm-v0.6' on one.csv" in text
        and "Written by `clustersim" in text
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--out", "e.txt"], "--out: e.txt must end in .yaml or .yml"),
        (["--engine", "vlm"], "--engine: unknown engine 'vlm' (did you mean 'vllm'?)"),
        (["--fit", "step_overhead"], "--fit: step_overhead: unknown profile field (did you mean 'step_overhead_s'?)"),
        (["--train-rows", "0,9"], "--train-rows: 9: no such row"),
        (["--train-rows", "a"], "--train-rows: expected row numbers"),
        (["--set", "scheduler.policy=fifo"], "data.csv:3 (with --set): scheduler.policy: unknown policy 'fifo'"),
        (["--data", "bad.csv"], "bad.csv:3: load: -4 must be positive"),
        (["--data", "absent.csv"], "absent.csv: no such file"),
        (["--doc", "page.md"], "--doc: expected FILE.md#name"),
    ],
)
def test_refusals_are_one_line_and_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "data.csv").write_text(DATA, encoding="utf-8")
    (tmp_path / "bad.csv").write_text(DATA.replace("batch,1,", "batch,-4,"), encoding="utf-8")
    options = {"--engine": "vllm-v0.6", "--out": "e.yaml", "--data": "data.csv"}
    for key, value in zip(args[::2], args[1::2], strict=True):
        options[key] = value
    data = options.pop("--data")
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, ["calibrate", data, *[x for kv in options.items() for x in kv]])
    finally:
        os.chdir(old)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("clustersim: error: ") and words in lines[0], lines
    assert not (tmp_path / "e.yaml").exists()


def test_help_describes_the_csv() -> None:
    result = cli("calibrate", "--help")
    assert result.exit_code == 0
    for words in ("DATA.csv", "load_kind", "rate_per_s", "--train-frac", "--fit-gpu", "leave-one-out"):
        assert words in result.output


# ----------------------------------------------------------------------------- benchmark tools' files
TOOL_DATA = Path(__file__).resolve().parents[1] / "data" / "calibrate"


def test_calibrates_from_a_vllm_json_replaying_its_requests(tmp_path: Path) -> None:
    out, figure = tmp_path / "my-vllm.yaml", tmp_path / "parity.png"
    result = cli("calibrate", str(TOOL_DATA / "vllm-detailed.json"), "--hardware", "H100-SXM", "--engine", "vllm-v0.6",
                 "--out", str(out), "--fit", "step_overhead_s", "--out-figure", str(figure))  # fmt: skip
    assert result.exit_code == 0, result.output
    out_text = result.output
    assert "calibrated engine 'vllm-v0.6' on vllm-detailed.json (sha256" in out_text and ": 1 rows" in out_text
    assert "H100-SXM Llama-3.1-8B TP1 rate 2/s, 5 requests, mean 106 in" in out_text  # model id from the file
    for label in ("TTFT ms", "ITL ms", "out tok/s", "TTFT p99", "ITL p99", "r (fitted)"):
        assert label in out_text
    assert f"wrote {out}" in out_text and f"wrote {figure}" in out_text and figure.stat().st_size > 0
    engine = load_profile_file(out, EngineProfile)
    assert "fitted by `clustersim calibrate` on vllm-detailed.json (sha256" in engine.step_overhead_s.source
    assert engine.step_overhead_s.value > VLLM.step_overhead_s.value  # the measurements are slower than the base


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "vllm-summary.json: a benchmark tool's JSON does not say which GPU it ran on: give --hardware"),
        (["--hardware", "H100-SXM", "--out-figure", "p.svg"], "--out-figure: p.svg must end in .png"),
        (["--hardware", "H100-SXM", "--tensor-parallel", "0"], "Invalid value for '--tensor-parallel'"),
        (["--hardware", "H100-SXM", "--model", "Llama-9"], "--model: unknown model 'Llama-9'"),
    ],
)
def test_refusals_for_tool_files_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    result = CliRunner().invoke(main, ["calibrate", str(TOOL_DATA / "vllm-summary.json"), "--engine", "vllm-v0.6",
                                       "--out", str(tmp_path / "e.yaml"), *args])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert words in result.stderr and not (tmp_path / "e.yaml").exists()
