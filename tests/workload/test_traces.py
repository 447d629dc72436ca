"""Trace files: each format read exactly, replayed with a time scale and caps, and every bad input one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SHARED

from clustersim.config.loader import scenario_from_mapping
from clustersim.config.workload import TraceArrivals, TraceFile
from clustersim.errors import ConfigError
from clustersim.workload.arrivals import replay
from clustersim.workload.traces import in_time_order, load_workload_data, read_trace

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.5000000,374,44
2023-11-16 18:15:47.0000000,396,109

2023-11-16 18:15:49.2500000,879,55
"""
MOONCAKE = """{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}
{"timestamp": 250, "input_length": 700, "output_length": 3, "hash_ids": [0, 3]}
{"timestamp": 1500, "input_length": 9, "output_length": 1}
"""


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in tmp_path, so messages name files by their bare names."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(name: str, text: str) -> Path:
    path = Path.cwd() / name
    path.write_text(text, encoding="utf-8")
    return path


def read(path: Path, fmt: str, **columns: str):
    return read_trace(path, TraceFile(path=path.name, format=fmt, columns=columns or None))


def error(path: Path, fmt: str, out_of_order: str | None = None, **columns: str) -> str:
    with pytest.raises(ConfigError) as info:
        table = read(path, fmt, **columns)
        if out_of_order is not None:
            in_time_order(table, out_of_order)
    return str(info.value)


# ----------------------------------------------------------------------------- reading
def test_azure_timestamps_count_from_the_first_row_and_blank_lines_are_skipped():
    table = read(write("a.csv", AZURE), "azure")
    assert table.arrival_at_s.tolist() == [0.0, 0.5, 2.75]
    assert table.prompt_tokens.tolist() == [374, 396, 879]
    assert table.output_tokens.tolist() == [44, 109, 55]
    assert table.line.tolist() == [2, 3, 5]


def test_mooncake_milliseconds_and_hash_ids():
    table = read(write("m.jsonl", MOONCAKE), "mooncake")
    assert table.arrival_at_s.tolist() == [0.0, 0.25, 1.5]
    assert table.prompt_tokens.tolist() == [6758, 700, 9]
    assert table.prefix_hash_ids == ((0, 1, 2), (0, 3), ())


def test_plain_csv_with_renamed_columns_and_sessions():
    path = write("p.csv", "t,in,out,user,extra\n0.5,10,2,7,x\n1.0,20,3,8,y\n")
    table = read(path, "csv", arrival_at_s="t", prompt_tokens="in", output_tokens="out", session_id="user")
    assert table.arrival_at_s.tolist() == [0.5, 1.0]
    assert table.session_id is not None and table.session_id.tolist() == [7, 8]


def test_parquet_with_the_default_column_names():
    path = Path.cwd() / "p.parquet"
    pq.write_table(
        pa.table({"arrival_at_s": [0.0, 2.0], "prompt_tokens": [5, 6], "output_tokens": [1, 2], "x": ["a", "b"]}),
        path,
    )
    table = read(path, "parquet")
    assert table.arrival_at_s.tolist() == [0.0, 2.0] and table.output_tokens.tolist() == [1, 2]
    assert table.row_word == "row"


def test_replay_scales_time_caps_lengths_and_carries_sessions_and_prefixes():
    table = read(write("m.jsonl", MOONCAKE), "mooncake")
    arrival = TraceArrivals(
        kind="trace", path="m.jsonl", format="mooncake", time_scale=2.0, max_prompt_tokens=1000, max_output_tokens=400
    )
    assert list(replay(arrival, table)) == [
        (0.0, 1000, 400, -1, (0, 1, 2)),
        (0.5, 700, 3, -1, (0, 3)),
        (3.0, 9, 1, -1, ()),
    ]


def test_out_of_order_rows_are_sorted_stably_when_asked():
    path = write("o.csv", "arrival_at_s,prompt_tokens,output_tokens\n2,1,1\n1,2,2\n2,3,3\n0,4,4\n")
    table = in_time_order(read(path, "csv"), "sort")
    assert table.arrival_at_s.tolist() == [0, 1, 2, 2]
    assert table.prompt_tokens.tolist() == [4, 2, 1, 3]
    assert table.line.tolist() == [5, 3, 2, 4]


# ----------------------------------------------------------------------------- bad trace files
@pytest.mark.parametrize(
    ("name", "text", "fmt", "message"),
    [
        ("e.csv", "", "azure", "e.csv: empty trace: no header and no rows"),
        ("h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "azure", "h.csv: empty trace: no requests"),
        (
            "c.csv",
            "TIMESTAMP,ContextToken,GeneratedTokens\n",
            "azure",
            "c.csv: line 1: no column 'ContextTokens' (did you mean 'ContextToken'?); "
            "columns: TIMESTAMP, ContextToken, GeneratedTokens",
        ),
        (
            "f.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n2023-11-16 18:15:47,1\n",
            "azure",
            "f.csv: line 3: 2 fields where the header has 3",
        ),
        (
            "i.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1.5,1\n",
            "azure",
            "i.csv: line 2: ContextTokens: '1.5' is not an integer",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\nyesterday,1,1\n",
            "azure",
            "t.csv: line 3: TIMESTAMP: 'yesterday' is not a date and time",
        ),
        (
            "n.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n2023-11-16 18:15:47,1,-4\n",
            "azure",
            "n.csv: line 3: GeneratedTokens: -4 is negative",
        ),
        (
            "z.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,1\n",
            "azure",
            "z.csv: line 2: ContextTokens: 0 tokens: every request needs at least 1",
        ),
        (
            "q.csv",
            'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,"1\n',
            "azure",
            "q.csv: line 2: malformed CSV: unexpected end of data",
        ),
        (
            "a.csv",
            "arrival_at_s,prompt_tokens,output_tokens\n-1,5,5\n",
            "csv",
            "a.csv: line 2: arrival_at_s: -1 is negative (times count from 0)",
        ),
        (
            "a.csv",
            "arrival_at_s,prompt_tokens,output_tokens\n0,5,5\nnan,5,5\n",
            "csv",
            "a.csv: line 3: arrival_at_s: nan is not a finite number",
        ),
        (
            "a.csv",
            "arrival_at_s,prompt_tokens,output_tokens\n0,5,5\nsoon,5,5\n",
            "csv",
            "a.csv: line 3: arrival_at_s: 'soon' is not a number",
        ),
        (
            "a.csv",
            "arrival,prompt_tokens,output_tokens\n0,5,5\n",
            "csv",
            "a.csv: line 1: no column 'arrival_at_s' (did you mean 'arrival'?); columns: arrival, prompt_tokens, output_tokens",
        ),
        (
            "j.jsonl",
            '{"timestamp": 0, "input_length": 1, "output_length": 1}\n{"timestamp": 1, \n',
            "mooncake",
            "j.jsonl: line 2: not valid JSON: Expecting property name enclosed in double quotes",
        ),
        (
            "j.jsonl",
            '{"timestamp": 0, "input_lenght": 1, "output_length": 1}\n',
            "mooncake",
            "j.jsonl: line 1: no field 'input_length' (did you mean 'input_lenght'?)",
        ),
        (
            "j.jsonl",
            '{"timestamp": 0, "input_length": 1, "output_length": 3.5}\n',
            "mooncake",
            "j.jsonl: line 1: output_length: 3.5 is not an integer",
        ),
        (
            "j.jsonl",
            '{"timestamp": "0", "input_length": 1, "output_length": 3}\n',
            "mooncake",
            "j.jsonl: line 1: timestamp: '0' is not a number",
        ),
        (
            "j.jsonl",
            '{"timestamp": 0, "input_length": 1, "output_length": 3, "hash_ids": "abc"}\n',
            "mooncake",
            "j.jsonl: line 1: hash_ids: expected a list of integers",
        ),
        (
            "j.jsonl",
            "\n[1, 2, 3]\n",
            "mooncake",
            "j.jsonl: line 2: expected a JSON object with timestamp, input_length, output_length",
        ),
        (
            "j.jsonl",
            '{"timestamp": 0, "input_length": -7, "output_length": 3}\n',
            "mooncake",
            "j.jsonl: line 1: input_length: -7 is negative",
        ),
    ],
)
def test_bad_trace_is_one_line_naming_file_line_and_problem(name, text, fmt, message):
    assert error(write(name, text), fmt) == message


def test_out_of_order_rows_are_refused_by_default():
    path = write("o.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,1,1\n2023-11-16 18:15:46,1,1\n")
    assert error(path, "azure", out_of_order="refuse") == (
        "o.csv: line 3: TIMESTAMP is 1 s before line 2's; the trace is out of time order "
        "(set out_of_order: sort to sort it)"
    )


def test_not_utf8():
    path = Path.cwd() / "b.csv"
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xff\xfe,1,1\n")
    assert error(path, "azure") == "b.csv: not a UTF-8 text file"


def test_bad_parquet_files():
    path = Path.cwd() / "p.parquet"
    pq.write_table(pa.table({"arrival_at_s": [0.0], "prompt_token": [5], "output_tokens": [1]}), path)
    assert error(path, "parquet") == (
        "p.parquet: no column 'prompt_tokens' (did you mean 'prompt_token'?); "
        "columns: arrival_at_s, prompt_token, output_tokens"
    )
    pq.write_table(pa.table({"arrival_at_s": [0.0, 1.0], "prompt_tokens": [5, 6], "output_tokens": [1, None]}), path)
    assert error(path, "parquet") == "p.parquet: row 2: output_tokens: missing value (null)"
    pq.write_table(pa.table({"arrival_at_s": [0.0], "prompt_tokens": [5.0], "output_tokens": [1]}), path)
    assert error(path, "parquet") == "p.parquet: prompt_tokens: expected integers, found double"
    pq.write_table(pa.table({"arrival_at_s": [0.0, 1.0], "prompt_tokens": [5, 6], "output_tokens": [1, 0]}), path)
    assert error(path, "parquet") == "p.parquet: row 2: output_tokens: 0 tokens: every request needs at least 1"
    path.write_text("not parquet")
    assert error(path, "parquet").startswith("p.parquet: not a readable Parquet file: ")


# ----------------------------------------------------------------------------- files named by a scenario
def trace_scenario(arrival: dict, **tenant: object) -> dict:
    return {
        "workload": {"tenants": [{"name": "t", "arrival": arrival, **tenant}]},
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "stop": {"max_requests": 10},
    }


def test_missing_trace_file_names_the_scenario_field_and_a_close_name(in_tmp: Path):
    (in_tmp / "traces").mkdir()
    (in_tmp / "traces" / "azure_conv.csv").write_text(AZURE)
    scenario = scenario_from_mapping(
        trace_scenario({"kind": "trace", "path": "traces/azure-conv.csv", "format": "azure"}), "s.yaml"
    )
    with pytest.raises(ConfigError) as info:
        load_workload_data(scenario.workload, in_tmp, "s.yaml")
    assert str(info.value) == (
        "s.yaml: workload.tenants[0].arrival.path: no such file: traces/azure-conv.csv (did you mean 'azure_conv.csv'?)"
    )


def test_empirical_lengths_from_a_trace_resolve_against_the_scenario_folder(in_tmp: Path):
    folder = in_tmp / "scenarios"
    folder.mkdir()
    (folder / "a.csv").write_text(AZURE)
    raw = trace_scenario(
        {"kind": "poisson", "rate_per_s": 1},
        prompt_tokens={"kind": "empirical", "trace": {"path": "a.csv", "format": "azure"}},
        output_tokens={"kind": "empirical", "trace": {"path": "nope.csv", "format": "azure"}},
    )
    with pytest.raises(ConfigError, match=r"s.yaml: workload.tenants\[0\].output_tokens.trace.path: no such file"):
        load_workload_data(scenario_from_mapping(raw, "s.yaml").workload, folder, "s.yaml")
    raw["workload"]["tenants"][0]["output_tokens"] = {
        "kind": "empirical",
        "trace": {"path": "a.csv", "format": "azure"},
        "lengths_of": "prompt",
    }
    data = load_workload_data(scenario_from_mapping(raw, "s.yaml").workload, folder, "s.yaml")["t"]
    assert data.observed_prompt_tokens is not None and data.observed_prompt_tokens.tolist() == [374, 396, 879]
    assert data.observed_output_tokens is not None and data.observed_output_tokens.tolist() == [374, 396, 879]


def test_a_bad_trace_stops_the_cli_before_any_output(in_tmp: Path):
    from click.testing import CliRunner

    from clustersim.cli import main

    write("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,1\n")
    write(
        "s.yaml",
        "workload: {tenants: [{name: t, arrival: {kind: trace, path: bad.csv, format: azure}}]}\n"
        "cluster: {hardware: H100-SXM, model: Llama-3.1-8B}\n",
    )
    result = CliRunner().invoke(main, ["run", "s.yaml", "--out", "out"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["clustersim: error: bad.csv: line 2: ContextTokens: -3 is negative"]
    assert not (in_tmp / "out").exists()


# ----------------------------------------------------------------------------- the public traces
@pytest.mark.parametrize(
    ("name", "fmt", "num_requests", "duration_min"),
    [
        ("azure2023_conv.csv", "azure", 19_366, 58),
        ("azure2023_code.csv", "azure", 8_819, 57),
        ("mooncake_conversation.jsonl", "mooncake", 12_031, 59),
    ],
)
def test_public_traces_read_as_documented(name, fmt, num_requests, duration_min):
    path = SHARED / "traces" / name
    if not path.exists():
        pytest.skip(f"{path} is absent (shared ground truth not mounted)")
    table = in_time_order(read_trace(path, TraceFile(path=str(path), format=fmt)), "refuse")
    assert table.num_requests == num_requests
    assert table.arrival_at_s[-1] / 60 == pytest.approx(duration_min, abs=1)
    if fmt == "mooncake":
        assert table.prefix_hash_ids is not None and all(ids[0] == 0 for ids in table.prefix_hash_ids)
    arrival = TraceArrivals(kind="trace", path=str(path), format=fmt, time_scale=0.5)
    head = list(itertools.islice(replay(arrival, table), 3))
    assert [h[0] for h in head] == (table.arrival_at_s[:3] * 0.5).tolist()
    assert np.all(np.diff(table.arrival_at_s) >= 0)
