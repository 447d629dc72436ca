"""DATA as any mix of files and folders: each tool's file as the Measurement rows it describes, the
options that complete them, and a one-line refusal of a file no format recognises."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from clustersim.calibration.datafiles import FileOptions, read_data
from clustersim.calibration.measurements import COLUMNS, Measurement, read_measurements
from clustersim.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data" / "calibrate"
H100 = FileOptions(hardware="H100-SXM")
CSV = ",".join(COLUMNS) + "\nH100-SXM,Llama-3.1-8B,1,,batch,1,128,8,0.020,0.0080,\n"


def only_row(path: Path, options: FileOptions = H100) -> Measurement:
    rows = read_data([path], options).rows
    assert len(rows) == 1
    return rows[0]


def test_vllm_result_without_per_request_lists() -> None:
    row = only_row(DATA / "vllm-summary.json")
    assert (row.hardware, row.model, row.tensor_parallel, row.weight_precision) == ("H100-SXM", "Llama-3.1-8B", 1, None)
    assert (row.load_kind, row.load, row.num_requests, row.interarrival_cv) == ("concurrency", 4.0, 40, 1.0)
    assert (row.prompt_tokens, row.output_tokens, row.requests) == (256, 32, None)  # 10240 / 40, 1280 / 40
    assert row.measured == pytest.approx(
        {"ttft_s": 0.0345, "itl_s": 0.0094, "output_tokens_per_s": 405.0, "ttft_p99_s": 0.052, "itl_p99_s": 0.0121}
    )
    assert (row.line, row.path) == (1, DATA / "vllm-summary.json")


def test_vllm_result_with_per_request_lists_keeps_the_successful_requests() -> None:
    row = only_row(DATA / "vllm-detailed.json", FileOptions("H100-SXM", tensor_parallel=2, weight_precision="FP8"))
    assert (row.tensor_parallel, row.weight_precision) == (2, "fp8")
    assert (row.load_kind, row.load, row.interarrival_cv, row.num_requests) == ("rate_per_s", 2.0, 1.0, 5)
    # the third prompt failed (an error, no output): it is not replayed; send times count from the first
    assert row.requests == ((0.0, 128, 16), (0.4, 96, 8), (1.3, 64, 12), (2.0, 128, 16), (2.6, 112, 10))
    assert (row.prompt_tokens, row.output_tokens) == (106, 12)  # 528 / 5, 62 / 5
    assert row.measured["ttft_s"] == pytest.approx(0.0127) and row.measured["output_tokens_per_s"] == 20.0
    assert row.setting() == "H100-SXM Llama-3.1-8B fp8 TP2 rate 2/s, 5 requests, mean 106 in / 12 out"


def test_guidellm_report_is_one_row_per_benchmark() -> None:
    sync, rate = read_data([DATA / "guidellm-report.json"], H100).rows
    assert (sync.line, sync.load_kind, sync.load, sync.model) == (1, "concurrency", 1.0, "Llama-3.1-8B")
    assert sync.requests == ((0.0, 180, 20), (0.25, 220, 28), (0.6, 200, 24))  # every request: replayed
    # ITL over every gap: (9.0 x 19 + 9.2 x 27 + 9.1 x 23) / 69 ms; TTFT and throughput from the metrics
    assert sync.measured["itl_s"] == pytest.approx((9.0 * 19 + 9.2 * 27 + 9.1 * 23) / 69 * 1e-3)
    assert sync.measured["ttft_s"] == pytest.approx(0.01567) and sync.measured["output_tokens_per_s"] == 95.0
    # 2 of 20 requests sampled: the report's means and counts, no replay; a constant rate has CV 0
    assert (rate.line, rate.load_kind, rate.load, rate.interarrival_cv) == (2, "rate_per_s", 4.0, 0.0)
    assert (rate.requests, rate.num_requests, rate.prompt_tokens, rate.output_tokens) == (None, 20, 300, 40)
    assert rate.measured["itl_s"] == pytest.approx(0.0097) and rate.measured["itl_p99_s"] == pytest.approx(0.0115)


def test_genai_perf_export() -> None:
    row = only_row(DATA / "genai-perf-export.json", FileOptions("H100-SXM", model="llama3.1-8b"))
    assert (row.model, row.load_kind, row.load, row.num_requests) == ("Llama-3.1-8B", "concurrency", 8.0, 48)
    assert (row.prompt_tokens, row.output_tokens, row.requests) == (550, 64, None)
    assert row.measured == pytest.approx(
        {"ttft_s": 0.11, "itl_s": 0.0098, "output_tokens_per_s": 700.0, "ttft_p99_s": 0.16, "itl_p99_s": 0.012}
    )


def test_a_folder_and_a_csv_together_in_order(tmp_path: Path) -> None:
    csv = tmp_path / "mine.csv"
    csv.write_text(CSV, encoding="utf-8")
    data = read_data([DATA, csv], H100)
    assert [(r.path.name if r.path else "", r.line) for r in data.rows] == [
        ("genai-perf-export.json", 1),
        ("guidellm-report.json", 1),
        ("guidellm-report.json", 2),
        ("vllm-detailed.json", 1),
        ("vllm-summary.json", 1),
        ("mine.csv", 2),
    ]
    assert data.rows[-1] == dataclasses.replace(read_measurements(csv).rows[0], path=csv)
    assert data.name == "genai-perf-export.json, guidellm-report.json and 3 more files" and len(data.sha256) == 64
    assert read_data([DATA], H100).name == "calibrate/ (4 files)"


def test_one_csv_reads_as_before(tmp_path: Path) -> None:
    csv = tmp_path / "data.csv"
    csv.write_text(CSV, encoding="utf-8")
    data = read_data([csv])
    assert (data.name, data.sha256, data.path) == ("data.csv", read_measurements(csv).sha256, csv)


def test_json_lines_are_one_row_each(tmp_path: Path) -> None:
    lines = [
        json.dumps(json.loads((DATA / name).read_text(encoding="utf-8")))
        for name in ("vllm-summary.json", "vllm-detailed.json")
    ]
    path = tmp_path / "appended.json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = read_data([path], H100).rows
    assert [(r.line, r.load_kind) for r in rows] == [(1, "concurrency"), (2, "rate_per_s")]


def test_a_hardware_profile_file_resolves_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = Path(__file__).resolve().parents[2] / "hardware_profiles" / "gpus" / "h100-sxm.yaml"
    (tmp_path / "my-gpu.yaml").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    row = only_row(DATA / "vllm-summary.json", FileOptions(hardware="my-gpu.yaml"))
    assert row.hardware == str(tmp_path / "my-gpu.yaml")


def write(tmp_path: Path, text: str, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "options", "source", "field", "words"),
    [
        ("hello\n", H100, "", "", "not a recognised format: expected a measurements CSV, a `vllm bench serve"),
        ('{"a": 1}', H100, "", "", "not a recognised format (a JSON object with keys a); expected"),
        ("[1, 2]", H100, "[0]", "", "not a recognised format: a JSON int"),
        ('{"completed": ', H100, "", "", "is not valid JSON (line 1"),
        (None, FileOptions(), "", "", "does not say which GPU it ran on: give --hardware NAME"),
        (None, FileOptions("H300"), "--hardware", "", "unknown hardware 'H300' (did you mean 'H200'?)"),
        (None, FileOptions("H100-SXM", model="Llama-9"), "--model", "", "unknown model 'Llama-9'"),
        (None, FileOptions("H100-SXM", weight_precision="int4"), "--weight-precision", "", "unknown value 'int4'"),
        ("MODEL", H100, "", "model", "'my-org/my-model' is not in the catalogue: give --model NAME"),
        ("NO-MODEL", H100, "", "model", "the file names no model: give --model NAME"),
    ],
)
def test_refusals_name_the_file_and_what_was_expected(
    tmp_path: Path, text: str | None, options: FileOptions, source: str, field: str, words: str
) -> None:
    summary = json.loads((DATA / "vllm-summary.json").read_text(encoding="utf-8"))
    if text == "MODEL":
        text = json.dumps({**summary, "model_id": "my-org/my-model"})
    elif text == "NO-MODEL":
        text = json.dumps({k: v for k, v in summary.items() if k != "model_id"})
    path = write(tmp_path, text if text is not None else json.dumps(summary))
    with pytest.raises(ConfigError) as caught:
        read_data([path], options)
    assert caught.value.source == (source if source.startswith("--") else f"{path}{source}")
    assert caught.value.field_path == field and words in caught.value.problem
    assert "\n" not in str(caught.value)


def test_options_with_only_csv_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--tensor-parallel: applies to benchmark tools' JSON files only"):
        read_data([write(tmp_path, CSV, "data.csv")], FileOptions(tensor_parallel=2))


def test_an_empty_folder_and_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty: no \.csv, \.json, \.jsonl files in this folder"):
        read_data([tmp_path / "empty"], H100)
    with pytest.raises(ConfigError, match=r"absent\.json: no such file"):
        read_data([tmp_path / "absent.json"], H100)
