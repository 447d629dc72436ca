"""The hostile and careless inputs found by hand, each kept as a regression test."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hostile_cli import TINY, assert_answered, cli, hostile_dir_fixture  # noqa: F401 - the fixture hostile_dir

import clustersim.runner
from clustersim.outdir import new_default_folder


def _error(result_stderr: str) -> str:
    return result_stderr.strip()


# ----------------------------------------------------------------------------- numbers at the boundary
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("kv.host_swap_bytes=.inf", "kv.host_swap_bytes"),
        ("slo.ttft_s=.inf", "slo.ttft_s: input should be a finite number"),
        ("cost.step_time_s=.inf", "cost.step_time_s: input should be a finite number"),
        ("workload.tenants.0.arrival.rate_per_s=1e-320", "too small to compute with"),
        ("workload.tenants.0.arrival.rate_per_s=.inf", "rate_per_s: input should be a finite number"),
        ("workload.tenants.0.arrival.rate_per_s=true", "rate_per_s: expects a number or text, not true"),
        ("seed=true", "seed: expects a number or text, not true"),
        ("workload.tenants.0.arrival={kind: gamma, rate_per_s: 5, cv: 1e-300}", "cv: input should be greater"),
        (f"workload.tenants.0.prompt_tokens.tokens={2**63}", "is too large (at most 2,147,483,647)"),
        (f"seed={'9' * 5000}", "a number too long to read"),
        (
            "workload.tenants.0={name: t, arrival: {kind: explicit, requests: [{arrival_at_s: 0, prompt_tokens: "
            f"{2**70}, output_tokens: 3}}]}}}}",
            "prompt_tokens: 1.18e+21 is too large",
        ),
        (
            "workload.tenants.0={name: t, arrival: {kind: explicit, requests: [{arrival_at_s: .inf, "
            "prompt_tokens: 3, output_tokens: 3}]}}",
            "arrival_at_s: input should be a finite number",
        ),
        ("scheduler={policy: vllm_v0, max_num_seqs: 4, max_num_batched_tokens: 2}", "must be at least max_num_seqs"),
        ("seed=" + "[" * 3000 + "]" * 3000, "nested too deeply"),
    ],
)
def test_bad_number_is_one_line_naming_the_field(hostile_dir: Path, override: str, expected: str) -> None:
    result = cli("run", "tiny.yaml", "--out", "out", "--set", override)
    assert_answered(result, (2,))
    assert expected in result.stderr
    assert not (hostile_dir / "out").exists()


def test_duplicate_keys_and_deep_nesting_are_refused(hostile_dir: Path) -> None:
    (hostile_dir / "dup.yaml").write_text(TINY + "seed: 2\n", encoding="utf-8")
    result = cli("run", "dup.yaml")
    assert_answered(result, (2,))
    assert "line 12, column 1: invalid YAML: duplicate key 'seed'" in result.stderr
    (hostile_dir / "deep.json").write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}", encoding="utf-8")
    result = cli("run", "deep.json")
    assert_answered(result, (2,))
    assert "nested too deeply" in result.stderr


def test_alias_bomb_is_refused_with_or_without_set(hostile_dir: Path) -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for name, previous in zip("bcdefghi", "abcdefgh", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    (hostile_dir / "bomb.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for extra in ((), ("--set", "seed=2")):
        result = cli("run", "bomb.yaml", *extra)
        assert_answered(result, (2,))
        assert "more than 100,000 values" in result.stderr


@pytest.mark.parametrize("path", ["/etc/passwd", "/proc/self/environ"])
def test_a_system_file_as_scenario_is_refused_without_echoing_it(hostile_dir: Path, path: str) -> None:
    if not Path(path).exists():
        pytest.skip(f"{path} does not exist here")
    result = cli("run", path)
    assert_answered(result, (2,))
    first_line = Path(path).read_bytes().split(b"\n")[0][:20].decode("utf-8", "replace")
    assert first_line[:12] not in result.stderr.split(": ", 2)[-1] or len(first_line) < 5


def test_a_newline_in_a_value_keeps_the_error_on_one_line(hostile_dir: Path) -> None:
    result = cli("run", "tiny.yaml", "--set", 'cluster.hardware="H100\\nSXM"')
    assert_answered(result, (2,))
    assert "\\n" in result.stderr


# ----------------------------------------------------------------------------- output folders
def test_out_at_a_file_under_a_file_too_long_or_in_proc(hostile_dir: Path) -> None:
    for out, expected in (
        ("tiny.yaml", "is a file, not a folder"),
        ("tiny.yaml/sub", "is under 'tiny.yaml', a file"),
        ("x" * 300, "cannot write there"),
        ("/proc/clustersim-test", "cannot write there"),
    ):
        result = cli("run", "tiny.yaml", "--out", out)
        assert_answered(result, (2,))
        assert expected in result.stderr, (out, result.stderr)


def test_scenario_name_cannot_place_the_default_folder(hostile_dir: Path) -> None:
    for name, expected in (("/abs/place", "abs-place-"), ("../..", "run-"), ("a\x00b", "a-b-")):
        result = cli("run", "tiny.yaml", "--quiet", "--set", f"name={json.dumps(name)}")
        assert_answered(result, (0,))
        folder = Path(result.stdout.strip())
        assert folder.parent == Path("runs") and folder.name.startswith(expected), folder


def test_default_folders_started_in_one_second_are_distinct(hostile_dir: Path) -> None:
    folders = {new_default_folder("same") for _ in range(3)}
    assert len(folders) == 3 and all(f.is_dir() for f in folders)


def test_reused_out_after_a_failed_run_holds_only_the_new_run(
    hostile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("run", "tiny.yaml", "--out", "out", "--quiet").exit_code == 0

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(clustersim.runner, "simulate", broken)
    result = cli("run", "tiny.yaml", "--out", "out", "--quiet")
    assert_answered(result, (3,))
    assert "internal error" in result.stderr and "clustersim-crash-" in result.stderr
    report = Path(result.stderr.split("traceback is in ")[1].split(" ")[0])
    assert "RuntimeError: boom" in report.read_text(encoding="utf-8")
    report.unlink()  # the report is the user's to read: the test's is no one's
    assert (hostile_dir / "out" / "INCOMPLETE").exists() and not (hostile_dir / "out" / "summary.json").exists()
    assert not (hostile_dir / "out" / "requests.parquet").exists()  # the first run's files are gone
    pytest.importorskip("matplotlib")
    result = cli("report", "out")
    assert_answered(result, (2,))
    assert "INCOMPLETE" in result.stderr
    monkeypatch.undo()
    assert cli("run", "tiny.yaml", "--out", "out", "--quiet").exit_code == 0
    assert not (hostile_dir / "out" / "INCOMPLETE").exists()


def test_compare_variant_folders_stay_inside_and_apart(hostile_dir: Path) -> None:
    result = cli("compare", "tiny.yaml", "--vary", "name=..,ok,a/b", "--out", "cmp", "--jobs", "1")
    assert_answered(result, (0,))
    runs = hostile_dir / "cmp" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["name=..", "name=a%2Fb", "name=ok"]
    assert all((p / "seed=1" / "summary.json").is_file() for p in runs.iterdir())
    result = cli("compare", "tiny.yaml", "--vary", "seed=1,1,1", "--out", "dup", "--jobs", "3")
    assert_answered(result, (2,))
    assert "--vary: axes (seed_value): two values are labelled '1': give distinct labels" in result.stderr


def test_compare_runs_the_other_variants_when_one_is_invalid(hostile_dir: Path) -> None:
    # the engine's 1024 seats do not fit a 512-token budget: that variant fails, the other runs, exit 1
    vary = "scheduler={policy: vllm_v0},{max_num_batched_tokens: 512}"
    result = cli("compare", "tiny.yaml", "--vary", vary, "--out", "bad", "--jobs", "2")
    assert_answered(result, (1,))
    assert "max_num_batched_tokens (512) must be at least max_num_seqs (1024)" in result.stderr
    table = result.stdout.splitlines()
    assert table[2].startswith("| policy-vllm_v0 | 20 | 0 | ")
    assert table[3].startswith("| max_num_batched_tokens-512 | - |")


# ----------------------------------------------------------------------------- traces
def _trace_scenario(folder: Path, path: str, fmt: str) -> None:
    (folder / "tr.yaml").write_text(
        "name: tr\nworkload:\n  tenants:\n    - name: t\n"
        f"      arrival: {{kind: trace, path: {path}, format: {fmt}}}\n"
        "cluster: {hardware: H100-SXM, model: Llama-3.1-8B}\ncost: {kind: unit, step_time_s: 0.01}\n",
        encoding="utf-8",
    )


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize(
    ("name", "body", "fmt", "expected"),
    [
        ("a.csv", AZURE_HEADER + "1700000000,10,5\n1700000001,10,5\n", "azure", "is a number, not a date"),
        ("b.csv", AZURE_HEADER + "2023-11-16 18:15:46.68,10,5\n,10,5\n", "azure", "line 3: TIMESTAMP: empty"),
        ("c.csv", AZURE_HEADER + "NaT,10,5\n", "azure", "TIMESTAMP: empty"),
        ("d.csv", AZURE_HEADER + "2023-11-16 18:15:46.68,1e30,5\n", "azure", "ContextTokens: '1e30' is not an integer"),
        ("e.csv", "arrival_at_s,prompt_tokens,output_tokens\n0,1e30,5\n", "csv", "'1e30' is not an integer"),
        (
            "f.jsonl",
            json.dumps({"timestamp": 0, "input_length": 2**70, "output_length": 5, "hash_ids": []}) + "\n",
            "mooncake",
            "input_length: 1.18e+21 is too large",
        ),
        ("g.csv", "arrival_at_s,prompt_tokens,output_tokens\n1e300,10,5\n", "csv", "is too late"),
    ],
)
def test_bad_trace_is_refused_not_misread(hostile_dir: Path, name: str, body: str, fmt: str, expected: str) -> None:
    (hostile_dir / name).write_text(body, encoding="utf-8")
    _trace_scenario(hostile_dir, name, fmt)
    result = cli("run", "tr.yaml", "--out", "out")
    assert_answered(result, (2,))
    assert expected in result.stderr


def test_time_zoned_azure_stamps_replay_without_a_warning(hostile_dir: Path) -> None:
    body = AZURE_HEADER + "2023-11-16 18:15:46.5+00:00,10,5\n2023-11-16 18:15:47.5+00:00,10,5\n"
    (hostile_dir / "tz.csv").write_text(body, encoding="utf-8")
    _trace_scenario(hostile_dir, "tz.csv", "azure")
    result = cli("run", "tr.yaml", "--out", "out", "--quiet")
    assert_answered(result, (0,))
    assert result.stderr == ""
    arrivals = pq.read_table(hostile_dir / "out" / "requests.parquet").column("arrival_at_s").to_pylist()
    assert arrivals == [0.0, 1.0]


def test_too_long_trace_path_is_one_line(hostile_dir: Path) -> None:
    _trace_scenario(hostile_dir, "x" * 5000 + ".csv", "csv")
    assert_answered(cli("run", "tr.yaml", "--out", "out"), (2,))


# ----------------------------------------------------------------------------- stalls
def test_preempted_request_that_can_never_return_is_rejected_with_a_reason(hostile_dir: Path) -> None:
    (hostile_dir / "stall.yaml").write_text(
        "name: stall\nworkload:\n  tenants:\n    - name: t\n      arrival:\n        kind: explicit\n"
        "        requests:\n"
        "          - {arrival_at_s: 0.0, prompt_tokens: 16, output_tokens: 500}\n"
        "          - {arrival_at_s: 0.001, prompt_tokens: 8650, output_tokens: 100}\n"
        "cluster: {hardware: H100-SXM, model: Llama-3.1-70B, tensor_parallel: 2}\n"
        "scheduler: {max_num_batched_tokens: 16384}\n"
        "kv: {watermark_frac: 0.01, num_blocks: 550}\n",
        encoding="utf-8",
    )
    result = cli("run", "stall.yaml", "--out", "out", "--quiet")
    assert_answered(result, (0,))
    rows = pq.read_table(hostile_dir / "out" / "requests.parquet").to_pylist()
    long_one = next(r for r in rows if r["prompt_tokens"] == 8650)
    assert long_one["status"] == "rejected" and long_one["num_preemptions"] == 1
    assert "above its 6-block watermark" in long_one["reject_reason"]
    assert next(r for r in rows if r["prompt_tokens"] == 16)["status"] == "completed"


# ----------------------------------------------------------------------------- custom profile files
@pytest.mark.parametrize(
    ("kind", "folder", "file", "field", "value", "expected"),
    [
        ("hardware", "gpus", "h100-sxm.yaml", "hbm_bandwidth_bytes_per_s", 0, "must be positive"),
        ("hardware", "gpus", "h100-sxm.yaml", "hbm_bandwidth_bytes_per_s", -1.0, "must be positive"),
        ("hardware", "gpus", "h100-sxm.yaml", "hbm_bandwidth_bytes_per_s", float("nan"), "finite number"),
        ("hardware", "gpus", "h100-sxm.yaml", "peak_bf16_flops_per_s", 0, "must be positive"),
        ("hardware", "gpus", "h100-sxm.yaml", "memory_efficiency_frac", float("inf"), "finite number"),
        ("hardware", "gpus", "h100-sxm.yaml", "memory_efficiency_frac", 1.5, "a fraction in (0, 1]"),
        ("hardware", "gpus", "h100-sxm.yaml", "roofline_blend_exponent", 1e-6, "at least 1"),
        ("model", "models", "llama-3.1-8b.yaml", "weight_bytes_per_param", 3, "not a precision"),
        ("model", "models", "llama-3.1-8b.yaml", "hidden_size", 0, "must be positive"),
        ("model", "models", "llama-3.1-8b.yaml", "num_kv_heads", 0, "must be positive"),
        ("model", "models", "llama-3.1-8b.yaml", "head_dim", -128, "must be positive"),
        ("engine", "engines", "vllm-v1.yaml", "step_overhead_s", float("nan"), "finite number"),
        ("engine", "engines", "vllm-v1.yaml", "step_overhead_s", -1e-3, "a time of at least 0 s"),
    ],
)
def test_custom_profile_numbers_are_range_checked(
    hostile_dir: Path, kind: str, folder: str, file: str, field: str, value: float, expected: str
) -> None:
    import yaml

    from clustersim.config.catalogue import builtin_data_dir

    profile = yaml.safe_load((builtin_data_dir("hardware_profiles") / folder / file).read_text(encoding="utf-8"))
    profile[field] = {"value": value, "source": "a hostile test"}
    (hostile_dir / "custom.yaml").write_text(yaml.safe_dump(profile), encoding="utf-8")
    scenario = TINY.replace("cost: {kind: unit, step_time_s: 0.01}\n", "")
    (hostile_dir / "roofline.yaml").write_text(scenario, encoding="utf-8")
    result = cli("run", "roofline.yaml", "--out", "out", "--set", f"cluster.{kind}=custom.yaml")
    assert_answered(result, (2,))
    assert expected in result.stderr and field in result.stderr


def test_a_plan_with_an_empty_or_repeated_seed_list_is_refused_in_one_line(hostile_dir: Path) -> None:
    # found by the fuzz of plan files: an empty list reached the evaluations and was an internal error
    for seeds in ("[]", "[1, 1]"):
        (hostile_dir / "p.yaml").write_text(
            f"base: tiny.yaml\nslo: {{ttft_s: 0.5, percentile: 90}}\nseeds: {seeds}\noptions: [{{name: a}}]\n",
            encoding="utf-8",
        )
        result = cli("plan", "p.yaml", "--out", "po")
        assert_answered(result, (2,))
        assert "p.yaml: seeds must be a non-empty list of distinct seeds" in result.stderr
