"""The measurements CSV: what it accepts, and a one-line error naming file, line and column for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.calibration.measurements import COLUMNS, read_measurements
from clustersim.errors import ConfigError

HEADER = ",".join(COLUMNS)
GOOD = "H200,Llama-3.1-8B,1,bf16,batch,8,32,128,0.012,0.0065,1228.7"


def write(tmp_path: Path, text: str, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_rows_comments_blanks_and_aliases(tmp_path: Path) -> None:
    text = f"""# measured on our cluster, 2024-05
{HEADER}

# the vLLM CI latency run
{GOOD}
  # a comment may be indented
h100,llama-3.1-8b,2,,concurrency,16,512,64,,0.02,
H100-SXM,Llama-3.1-8B,1,FP8,rate_per_s,2.5,1024,256,0.05,,
"""
    data = read_measurements(write(tmp_path, text))
    first, second, third = data.rows
    assert (first.line, first.hardware, first.model, first.weight_precision) == (5, "H200", "Llama-3.1-8B", "bf16")
    assert (first.load_kind, first.load, first.prompt_tokens, first.output_tokens) == ("batch", 8.0, 32, 128)
    assert first.measured == {"ttft_s": 0.012, "itl_s": 0.0065, "output_tokens_per_s": 1228.7}
    assert (second.line, second.hardware, second.model) == (7, "H100-SXM", "Llama-3.1-8B")  # aliases resolved
    assert second.weight_precision is None and second.measured == {"itl_s": 0.02}
    assert (third.load_kind, third.load, third.weight_precision) == ("rate_per_s", 2.5, "fp8")
    assert data.num_values == 5 and len(data.sha256) == 64
    assert first.setting() == "H200 Llama-3.1-8B bf16 TP1 batch 8, 32 in / 128 out"


def test_columns_in_any_order(tmp_path: Path) -> None:
    names = list(reversed(COLUMNS))
    values = list(reversed(GOOD.split(",")))
    data = read_measurements(write(tmp_path, f"{','.join(names)}\n{','.join(values)}\n"))
    assert data.rows[0].measured["output_tokens_per_s"] == 1228.7 and data.rows[0].tensor_parallel == 1


def test_a_profile_file_next_to_the_csv(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[2] / "hardware_profiles" / "gpus" / "h200.yaml"
    (tmp_path / "my-gpu.yaml").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    data = read_measurements(write(tmp_path, f"{HEADER}\n{GOOD.replace('H200', 'my-gpu.yaml', 1)}\n"))
    assert data.rows[0].hardware == "my-gpu.yaml"


def _replace(column: str, value: str) -> str:
    cells = GOOD.split(",")
    cells[COLUMNS.index(column)] = value
    return ",".join(cells)


REFUSED = [
    # (file text, line, field, words in the problem)
    ("", 0, "header", "the file is empty"),
    ("# only a comment\n", 0, "header", "the file is empty"),
    (f"{HEADER}\n", 0, "", "no data rows"),
    (HEADER.replace(",itl_s", "") + "\n" + GOOD, 1, "header", "missing column(s) itl_s"),
    (
        HEADER.replace("ttft_s", "ttft_ms") + "\n" + GOOD,
        1,
        "header",
        "unknown column 'ttft_ms' (did you mean 'ttft_s'?)",
    ),
    (HEADER + ",notes\n" + GOOD + ",x", 1, "header", "unknown column 'notes'"),
    (HEADER + ",load\n" + GOOD + ",3", 1, "load", "column appears twice"),
    (f"{HEADER}\n{GOOD},1", 2, "", "12 fields where the header has 11"),
    (f"{HEADER}\n{_replace('hardware', 'H300')}", 2, "hardware", "unknown hardware 'H300' (did you mean"),
    (f"{HEADER}\n{_replace('hardware', '')}", 2, "hardware", "empty"),
    (f"{HEADER}\n{_replace('hardware', 'nowhere.yaml')}", 2, "hardware", "no such hardware profile file"),
    (f"{HEADER}\n{_replace('model', 'Llama-9')}", 2, "model", "unknown model 'Llama-9'"),
    (f"{HEADER}\n{_replace('tensor_parallel', '0')}", 2, "tensor_parallel", "must be positive"),
    (f"{HEADER}\n{_replace('tensor_parallel', '1.5')}", 2, "tensor_parallel", "not a whole number"),
    (f"{HEADER}\n{_replace('weight_precision', 'int4')}", 2, "weight_precision", "unknown value 'int4'"),
    (f"{HEADER}\n{_replace('load_kind', 'qps')}", 2, "load_kind", "choose one of: batch, concurrency, rate_per_s"),
    (f"{HEADER}\n{_replace('load', '-2')}", 2, "load", "must be positive"),
    (f"{HEADER}\n{_replace('load', '0')}", 2, "load", "must be positive"),
    (f"{HEADER}\n{_replace('load', '2.5')}", 2, "load", "not a whole number"),
    (f"{HEADER}\n{_replace('load', '')}", 2, "load", "not a whole number"),
    (f"{HEADER}\n{_replace('load_kind', 'rate_per_s').replace(',8,', ',-1,')}", 2, "load", "positive, finite"),
    (f"{HEADER}\n{_replace('load_kind', 'rate_per_s').replace(',8,', ',inf,')}", 2, "load", "positive, finite"),
    (f"{HEADER}\n{_replace('prompt_tokens', 'many')}", 2, "prompt_tokens", "not a whole number"),
    (f"{HEADER}\n{_replace('output_tokens', '99999999999')}", 2, "output_tokens", "at most 2,147,483,647"),
    (f"{HEADER}\n{_replace('ttft_s', '-0.1')}", 2, "ttft_s", "positive, finite"),
    (f"{HEADER}\n{_replace('itl_s', 'nan')}", 2, "itl_s", "positive, finite"),
    (f"{HEADER}\n{_replace('output_tokens_per_s', 'fast')}", 2, "output_tokens_per_s", "not a number"),
    (f"{HEADER}\n" + GOOD.rsplit(",", 3)[0] + ",,,", 2, "ttft_s, itl_s, output_tokens_per_s", "nothing measured"),
    (f"{HEADER}\n{_replace('output_tokens', '1')}", 2, "itl_s", "needs output_tokens of at least 2"),
    (f"# note\n{HEADER}\n# row\n\n{GOOD}\n{_replace('load', '-1')}", 6, "load", "must be positive"),
]


@pytest.mark.parametrize(("text", "line", "field", "words"), REFUSED)
def test_refusals_name_file_line_and_column(tmp_path: Path, text: str, line: int, field: str, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        read_measurements(path)
    assert caught.value.source == (f"{path}:{line}" if line else str(path))
    assert caught.value.field_path == field
    assert words in caught.value.problem
    assert "\n" not in str(caught.value)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        read_measurements(tmp_path / "absent.csv")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        read_measurements(binary)
