"""The validation corpus: its files load, and a malformed one is refused with file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.config.catalogue import builtin_data_dir
from clustersim.errors import ConfigError
from clustersim.validation.corpus import COLUMNS, load_corpus, load_corpus_file

GOOD = {
    "id": "lab-a",
    "publisher": "lab",
    "source_url": "https://example.org/bench",
    "source_where": "Table 1",
    "source_date": "2025-06",
    "engine": "vllm",
    "engine_version": "0.9.0",
    "gpu": "H100-SXM",
    "num_gpus": "1",
    "tp": "1",
    "pp": "1",
    "ep": "1",
    "dp": "1",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "weight_precision": "bf16",
    "kv_precision": "",
    "dataset": "random",
    "prompt_tokens": "1000",
    "output_tokens": "100",
    "load_kind": "concurrency",
    "load": "8",
    "num_requests": "80",
    "max_num_seqs": "",
    "max_num_batched_tokens": "",
    "gpu_memory_frac": "0.9",
    "features": "",
    "output_tok_per_s": "1234.5",
    "ttft_mean_ms": "50",
    "notes": "a, quoted note",
}


def write(folder: Path, name: str, rows: list[dict[str, str]], header: tuple[str, ...] = COLUMNS) -> Path:
    lines = ["# a comment line", ",".join(header)]
    for row in rows:
        lines.append(",".join(f'"{row.get(c, "")}"' for c in header))
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_good_file_loads(tmp_path):
    (row,) = load_corpus_file(write(tmp_path, "lab.csv", [GOOD]))
    assert (row.row_id, row.engine, row.load_kind, row.load, row.num_requests) == (
        "lab-a",
        "vllm",
        "concurrency",
        8.0,
        80,
    )
    assert row.metrics == {"output_tok_per_s": 1234.5, "ttft_mean_ms": 50.0}
    assert row.gpu_memory_frac == 0.9 and row.features == frozenset()
    assert row.where == "lab.csv:3"  # the comment line counts


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_gpus": "eight"}, "lab.csv:3: num_gpus: 'eight' is not a whole number"),
        ({"load_kind": "burst"}, "lab.csv:3: load_kind: 'burst' is not one of offline, concurrency, rate, batch"),
        ({"load": ""}, "lab.csv:3: load: must be given for load_kind concurrency"),
        ({"id": "other-a"}, "lab.csv:3: id: 'other-a' must start with the publisher, 'lab-'"),
        ({"output_tok_per_s": "-3"}, "lab.csv:3: output_tok_per_s: '-3' must be a positive number"),
        ({"output_tok_per_s": "", "ttft_mean_ms": ""}, "lab.csv:3: output_tok_per_s: the row publishes no metric"),
        ({"gpu_memory_frac": "90"}, "lab.csv:3: gpu_memory_frac: '90' must be a fraction in (0, 1]"),
        ({"features": "eagr"}, "lab.csv:3: features: unknown feature 'eagr' (did you mean 'eager'?)"),
        ({"features": "p99_bound=2000"}, "lab.csv:3: features: 'p99_bound=2000': write p99_bound=<TTFT ms>/<TPOT ms>"),
        ({"features": "p99_bound=2000/200"}, "lab.csv:3: features: p99_bound needs a rate row with a finite rate"),
        ({"features": "dispatch=fastest"}, "lab.csv:3: features: 'dispatch=fastest': write dispatch=<rule>, one of"),
        (
            {"features": "max_utilization"},
            "lab.csv:3: features: max_utilization is a TensorRT-LLM option; the engine is",
        ),
        ({"features": "long_prefill=0"}, "lab.csv:3: features: 'long_prefill=0': write long_prefill=<tokens>, a whole"),
        ({"features": "client_gap=1.4"}, "lab.csv:3: features: 'client_gap=1.4': write client_gap=<ms>/<us per prompt"),
        ({"features": "client_gap=-1/4"}, "lab.csv:3: features: 'client_gap=-1/4': write client_gap=<ms>/<us per"),
        (
            {"features": "client_gap=1.4/4.26", "load_kind": "rate", "load": "2"},
            "lab.csv:3: features: client_gap is a closed loop's wait between requests; the row's load_kind is rate",
        ),
        ({"features": "long_prefill=2.5k"}, "lab.csv:3: features: 'long_prefill=2.5k': write long_prefill=<tokens>"),
        ({"features": "multi_step=0"}, "lab.csv:3: features: 'multi_step=0': write multi_step=<steps>, a whole number"),
        (
            {"features": "multi_step=8", "engine": "sglang"},
            "lab.csv:3: features: multi_step is vLLM V0's multi-step scheduling; the engine is sglang",
        ),
        (
            {"features": "earlier_runs=1000-1000/10+1000/80", "dataset": "sglang-random-1000-1000"},
            "lab.csv:3: features: 'earlier_runs=1000-1000/10+1000/80': write earlier_runs=<IN>-<OUT>/<prompts>+...",
        ),
        (
            {"features": "earlier_runs=1000-1000/10"},
            "lab.csv:3: features: earlier_runs are runs of the same seeded client: the dataset must be sglang-random",
        ),
        (
            {"features": "gpu_doubt="},
            "lab.csv:3: features: 'gpu_doubt=': write gpu_doubt=<GPU> (a hardware profile's name)",
        ),
        (
            {"features": "gpu_doubt=h100-sxm"},
            "lab.csv:3: features: gpu_doubt=h100-sxm names the row's own GPU: name the one its figures match",
        ),
        (
            {"dataset": "random-range-1.5"},
            "lab.csv:3: dataset: 'random-range-1.5': write random-range-R with R in [0, 1]",
        ),
        (
            {"dataset": "sglang-random-8000"},
            "lab.csv:3: dataset: 'sglang-random-8000': write sglang-random-IN-OUT or ...-IN-OUT-from0",
        ),
        (
            {"weight_precision": "fp6"},
            "lab.csv:3: weight_precision: 'fp6' is not one of bf16, fp16, fp8, fp4, int4, int8",
        ),
    ],
)
def test_a_bad_value_names_file_line_and_column(tmp_path, change, message):
    with pytest.raises(ConfigError) as info:
        load_corpus_file(write(tmp_path, "lab.csv", [{**GOOD, **change}]))
    assert str(info.value).startswith(message)


def test_a_bad_header_is_refused(tmp_path):
    header = tuple("ttft_ms" if c == "ttft_mean_ms" else c for c in COLUMNS)
    with pytest.raises(ConfigError, match=r"lab.csv:2: ttft_ms: unknown column"):
        load_corpus_file(write(tmp_path, "lab.csv", [GOOD], header))
    with pytest.raises(ConfigError, match=r"lab.csv:2: notes: column missing"):
        load_corpus_file(write(tmp_path, "lab.csv", [GOOD], COLUMNS[:-1]))


def test_ids_are_unique_across_files(tmp_path):
    write(tmp_path, "a.csv", [GOOD])
    write(tmp_path, "b.csv", [GOOD])
    with pytest.raises(ConfigError, match=r"b.csv:3: id: 'lab-a' is also the id of a.csv:3"):
        load_corpus(tmp_path)


def test_the_shipped_corpus_meets_its_bar():
    rows = load_corpus(builtin_data_dir("validation") / "corpus")
    assert len(rows) >= 80
    assert len({r.publisher for r in rows}) >= 5
    assert {"vllm", "sglang", "trtllm"} <= {r.engine for r in rows}
    assert {"A100-80GB", "H100-SXM", "H200"} <= {r.gpu for r in rows}
    assert all(r.source_url.startswith("http") for r in rows)


def test_a_row_may_state_its_per_prompt_step_cap_and_dispatch_rule(tmp_path):
    capped = {**GOOD, "features": "long_prefill=256;eager;dispatch=least_outstanding"}
    (row,) = load_corpus_file(write(tmp_path, "lab.csv", [capped]))
    assert row.long_prefill_tokens == 256 and row.features == frozenset({"eager"})
    assert row.dispatch == "least_outstanding"
    (plain,) = load_corpus_file(write(tmp_path, "lab.csv", [GOOD]))
    assert plain.long_prefill_tokens is None and plain.dispatch is None and plain.multi_step is None
    (stepped,) = load_corpus_file(write(tmp_path, "lab.csv", [{**GOOD, "features": "eager;multi_step=9"}]))
    assert stepped.multi_step == 9 and stepped.features == frozenset({"eager"})


def test_a_rate_row_may_state_the_p99_bounds_its_rate_was_raised_to(tmp_path):
    bounded = {**GOOD, "load_kind": "rate", "load": "90.5", "features": "eager;p99_bound=2000/200"}
    (row,) = load_corpus_file(write(tmp_path, "lab.csv", [bounded]))
    assert row.p99_bounds_ms == (2000.0, 200.0) and row.features == frozenset({"eager"})


def test_a_closed_loop_row_may_state_its_clients_work_between_requests(tmp_path):
    gap = {**GOOD, "features": "client_gap=1.4/4.26"}
    (row,) = load_corpus_file(write(tmp_path, "lab.csv", [gap]))
    assert row.client_gap == pytest.approx((1.4e-3, 4.26e-6)) and row.features == frozenset()


def test_a_seeded_row_may_name_the_runs_its_server_served_before(tmp_path):
    warm = {**GOOD, "dataset": "sglang-random-8000-1000", "features": "earlier_runs=1000-1000/10+8000-1000/80"}
    (row,) = load_corpus_file(write(tmp_path, "lab.csv", [warm]))
    assert row.earlier_runs == ((1000, 1000, 10), (8000, 1000, 80)) and row.features == frozenset()


def test_a_row_may_name_the_gpu_its_figures_match_instead_of_its_sources(tmp_path):
    doubted = {**GOOD, "features": "eager;gpu_doubt=H100-PCIe"}
    (row,) = load_corpus_file(write(tmp_path, "lab.csv", [doubted]))
    assert row.gpu_doubt == "H100-PCIe" and row.gpu == "H100-SXM" and row.features == frozenset({"eager"})
    (plain,) = load_corpus_file(write(tmp_path, "lab.csv", [GOOD]))
    assert plain.gpu_doubt is None
