"""``clustersim validate``: runs a corpus, prints the error tables, reuses finished rows, refuses bad input."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_corpus import GOOD, write

from clustersim.cli import main
from clustersim.validation import crossval
from clustersim.validation.corpus import COLUMNS

SMALL = {**GOOD, "num_requests": "16", "prompt_tokens": "128", "output_tokens": "16", "load": "4"}


def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    rows = [
        SMALL,
        {**SMALL, "id": "lab-b", "gpu": "A100-80GB", "load_kind": "rate", "load": "2"},
        {**SMALL, "id": "lab-c", "model": "acme/unknown-13b"},
    ]
    write(folder, "lab.csv", rows)
    return folder


def test_validate_runs_rows_prints_errors_and_reuses_runs(tmp_path):
    runner = CliRunner()
    folder, out = corpus(tmp_path), tmp_path / "out"
    result = runner.invoke(main, ["validate", str(folder), "--out", str(out), "--jobs", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "3 rows from 1 publishers (lab); 2 simulated, 1 not simulated, 0 failed" in result.output
    assert "| vLLM | H100-SXM | 1 |" in result.output and "| vLLM | A100-80GB | 1 |" in result.output
    assert "| skipped | no model profile for acme/unknown-13b | 1 |" in result.output
    with (out / "comparisons.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["row_id"], r["metric"]) for r in rows} == {
        (i, m) for i in ("lab-a", "lab-b") for m in ("output_tok_per_s", "ttft_mean_ms")
    }
    mtime = (out / "runs" / "lab-a" / "requests.parquet").stat().st_mtime_ns
    again = runner.invoke(main, ["validate", str(folder), "--out", str(out), "--jobs", "1", "--quiet"])
    assert again.exit_code == 0
    assert (out / "runs" / "lab-a" / "requests.parquet").stat().st_mtime_ns == mtime  # reused, not run again


def test_a_doc_block_of_its_own_gets_the_summary_and_both_error_tables(tmp_path):
    runner = CliRunner()
    folder, doc = corpus(tmp_path), tmp_path / "page.md"
    doc.write_text("# Page\n\n<!-- BEGIN unseen -->\nold\n<!-- END unseen -->\n\n<!-- BEGIN unseen-skipped -->\n"
                   "old\n<!-- END unseen-skipped -->\n\n<!-- BEGIN corpus -->\nkept\n<!-- END corpus -->\n")  # fmt: skip
    args = ["validate", str(folder), "--rows", "lab", "--out", str(tmp_path / "o"), "--jobs", "1", "--quiet"]
    result = runner.invoke(main, [*args, "--doc", f"{doc}#unseen"])
    assert result.exit_code == 0, result.output
    text = doc.read_text()
    block = text.split("<!-- BEGIN unseen -->")[1].split("<!-- END unseen -->")[0]
    assert "3 rows from 1 publishers (lab)" in block and "per engine and GPU" in block
    assert "| vLLM | all | 2 |" in block and "| vLLM | A100-80GB | 1 |" in block
    skipped = text.split("<!-- BEGIN unseen-skipped -->")[1].split("<!-- END unseen-skipped -->")[0]
    assert "no model profile for acme/unknown-13b" in skipped
    assert "kept" in text  # the corpus block is the fit's: left alone
    refused = runner.invoke(main, ["validate", str(folder), "--fit", "--doc", f"{doc}#unseen"])
    assert refused.exit_code == 2 and "give the file alone" in refused.output


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    runner = CliRunner()
    folder = tmp_path / "bad"
    folder.mkdir()
    write(folder, "lab.csv", [{**GOOD, "num_gpus": "eight"}])
    result = runner.invoke(main, ["validate", str(folder), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.strip() == "clustersim: error: lab.csv:3: num_gpus: 'eight' is not a whole number"
    assert runner.invoke(main, ["validate", "--write-profiles"]).exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no *.csv file" in runner.invoke(main, ["validate", str(empty)]).output
    assert len(COLUMNS) == 42


def test_a_profiles_folder_must_be_one(tmp_path):
    result = CliRunner().invoke(main, ["validate", "--profiles", str(tmp_path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "is not a hardware_profiles folder (gpus/, models/, engines/)" in result.output


def test_a_broken_profile_is_an_error_not_a_missing_gpu(tmp_path):
    import shutil

    from clustersim.config.catalogue import Catalogue

    profiles = tmp_path / "hp"
    shutil.copytree(Catalogue.builtin().root, profiles)
    h100 = profiles / "gpus" / "h100-sxm.yaml"
    h100.write_text(h100.read_text().replace("value: 6.9711e+14", "value: -5"))
    args = ["validate", str(corpus(tmp_path)), "--profiles", str(profiles), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert f"{h100}: sustained_bf16_flops_per_s: -5 must be positive" in result.output
    assert "no hardware profile" not in result.output


def test_a_row_whose_ttft_no_gpu_could_reach_is_warned_about(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    # 64 clients at once with 8,000-token prompts on one H100: over 7 s of prefill, published p99 0.5 s
    cached = {**SMALL, "prompt_tokens": "8000", "load": "64", "num_requests": "128", "ttft_p99_ms": "500"}
    write(folder, "lab.csv", [cached])
    result = CliRunner().invoke(main, ["validate", str(folder), "--out", str(tmp_path / "o"), "--jobs", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    assert (
        "warning: lab.csv:3: lab-a: published p99 TTFT 500 ms, but the first wave of 64 prompts needs" in result.output
    )


def test_a_fit_keeps_each_fit_and_a_rerun_resumes_from_them(tmp_path):
    folder, out = tmp_path / "corpus", tmp_path / "out"
    folder.mkdir()
    write(folder, "lab.csv", [SMALL, {**SMALL, "id": "lab-b", "prompt_tokens": "1024"}])
    write(folder, "other.csv", [{**SMALL, "id": "other-a", "publisher": "other", "output_tokens": "64"}])
    args = ["validate", str(folder), "--fit", "--out", str(out), "--jobs", "1", "--quiet", "--iterations", "2",
            "--fold-iterations", "2"]  # fmt: skip
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    kept = sorted(p.name for p in (out / "fits").iterdir())
    assert kept == ["all-rows.json", "without-lab.json", "without-other.json"]
    assert "of 2 leave-one-publisher-out fits converged" in first.output
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "fits").iterdir()}
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert {p.name: p.stat().st_mtime_ns for p in (out / "fits").iterdir()} == stamps  # resumed, not refitted
    assert again.output.split("wrote")[0] == first.output.split("wrote")[0]  # the same tables


def test_start_from_needs_a_fit_and_an_earlier_fit_folder(tmp_path):
    without_fit = CliRunner().invoke(main, ["validate", "--start-from", str(tmp_path)])
    assert without_fit.exit_code == 2 and "need --fit" in without_fit.output
    empty = CliRunner().invoke(main, ["validate", "--fit", "--start-from", str(tmp_path), "--out", str(tmp_path / "o")])
    assert empty.exit_code == 2
    assert f"--start-from: {tmp_path} holds no fits/ folder" in empty.output
    assert len(empty.output.strip().splitlines()) == 1


def test_a_fit_started_from_an_earlier_one_starts_where_it_ended(tmp_path, monkeypatch):
    folder, first_out, second_out = tmp_path / "corpus", tmp_path / "first", tmp_path / "second"
    folder.mkdir()
    write(folder, "lab.csv", [SMALL, {**SMALL, "id": "lab-b", "prompt_tokens": "1024"}])
    write(folder, "other.csv", [{**SMALL, "id": "other-a", "publisher": "other", "output_tokens": "64"}])
    args = ["validate", str(folder), "--fit", "--jobs", "1", "--quiet", "--iterations", "2", "--fold-iterations", "2"]
    assert CliRunner().invoke(main, [*args, "--out", str(first_out)]).exit_code == 0
    starts = []
    real_fit = crossval.fit
    monkeypatch.setattr(crossval, "fit", lambda ev, x0, *rest: starts.append(x0.copy()) or real_fit(ev, x0, *rest))
    second = CliRunner().invoke(main, [*args, "--out", str(second_out), "--start-from", str(first_out)])
    assert second.exit_code == 0, second.output
    ended = {name: json.loads((first_out / "fits" / f"{name}.json").read_text())
             for name in ("all-rows", "without-lab", "without-other")}  # fmt: skip
    labels = ended["all-rows"]["labels"]
    assert labels and all(record["labels"] == labels for record in ended.values())
    assert starts[0].tolist() == ended["all-rows"]["x"]  # the all-rows fit resumes where it ended
    # folds start at the second all-rows fit, except the parameters the left-out rows touch: the first
    # fold's; here every parameter touches every row, so each fold starts where its first run ended
    assert [s.tolist() for s in starts[1:]] == [ended["without-lab"]["x"], ended["without-other"]["x"]]
    # and it says how far the cross-validated error moved from the run it continued
    first_table = pq.read_table(first_out / "cross-validated" / "comparisons.parquet").to_pylist()
    first_errors = [abs(r["error_pct"]) for r in first_table if r["scored"] and r["kind"] == "throughput"]
    assert "Against the run it continued (first), per engine and metric:" in second.output
    line = next(x for x in second.output.splitlines() if x.startswith("| vLLM | throughput |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "3" and cells[3] == f"{sum(first_errors) / len(first_errors):.1f}"
    assert float(cells[5]) == pytest.approx(float(cells[4]) - float(cells[3]), abs=0.11)
    # continued in place (--out is --start-from): compared with the run as it was before this one
    again = CliRunner().invoke(main, [*args, "--out", str(first_out), "--start-from", str(first_out)])
    assert again.exit_code == 0, again.output
    line = next(x for x in again.output.splitlines() if x.startswith("| vLLM | throughput |"))
    assert line.split("|")[4].strip() == f"{sum(first_errors) / len(first_errors):.1f}"


def test_a_corpus_with_no_row_to_simulate_says_so_without_empty_lists(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write(folder, "lab.csv", [{**SMALL, "id": "lab-x", "model": "acme/unknown-13b"}])
    result = CliRunner().invoke(main, ["validate", str(folder), "--out", str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "1 rows from 1 publishers (lab); 0 simulated, 1 not simulated, 0 failed.\n" in result.output
    assert "Simulated: engines" not in result.output


def test_hardware_runs_every_row_on_another_gpu_and_is_refused_where_it_cannot_apply(tmp_path):
    runner = CliRunner()
    folder, out = corpus(tmp_path), tmp_path / "out"
    args = ["validate", str(folder), "--rows", "lab-a", "--rows", "lab-b", "--jobs", "1", "--quiet"]
    result = runner.invoke(main, [*args, "--out", str(out), "--hardware", "h100-pcie"])
    assert result.exit_code == 0, result.output
    assert "Every row simulated on H100-PCIe (--hardware), not on the GPU its source names." in result.output
    assert (
        "| vLLM | H100-PCIe | 2 |" in result.output and "H100-SXM" not in result.output.split("per engine and GPU")[1]
    )
    unknown = runner.invoke(main, [*args, "--out", str(tmp_path / "o2"), "--hardware", "H101"])
    assert unknown.exit_code == 2 and len(unknown.output.strip().splitlines()) == 1
    assert "--hardware: GPU:" in unknown.output and "H101" in unknown.output
    fitted = runner.invoke(main, [*args, "--fit", "--hardware", "H100-PCIe"])
    assert fitted.exit_code == 2 and "--hardware is a what-if" in fitted.output


def test_a_gpu_in_doubt_must_name_a_known_gpu(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write(folder, "lab.csv", [{**SMALL, "features": "gpu_doubt=H100-PCI"}])
    result = CliRunner().invoke(main, ["validate", str(folder), "--out", str(tmp_path / "o"), "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "clustersim: error: lab.csv:3: features: gpu_doubt=H100-PCI: no hardware profile of that name "
        "(clustersim profiles lists them)"
    )


def test_a_row_whose_gpu_is_in_doubt_is_predicted_by_every_fit_but_fitted_by_none(tmp_path, monkeypatch):
    folder, out = tmp_path / "corpus", tmp_path / "out"
    folder.mkdir()
    doubted = {**SMALL, "id": "lab-b", "prompt_tokens": "1024", "features": "gpu_doubt=H100-PCIe"}
    write(folder, "lab.csv", [SMALL, doubted])
    write(
        folder,
        "other.csv",
        [
            {**SMALL, "id": "other-a", "publisher": "other", "output_tokens": "64"},
            {**SMALL, "id": "other-b", "publisher": "other", "features": "gpu_doubt=H100-PCIe"},
        ],
    )
    write(folder, "third.csv", [{**SMALL, "id": "third-a", "publisher": "third", "features": "gpu_doubt=H100-PCIe"}])
    fitted = []
    real_fit = crossval.fit
    monkeypatch.setattr(crossval, "fit", lambda ev, *rest: fitted.append([r.row.row_id for r in ev.rows])
                        or real_fit(ev, *rest))  # fmt: skip
    args = ["validate", str(folder), "--fit", "--out", str(out), "--jobs", "1", "--quiet", "--iterations", "1",
            "--fold-iterations", "1"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    # all rows, without lab, without other; a publisher whose rows are all in doubt has no fold of its own
    assert fitted == [["lab-a", "other-a"], ["other-a"], ["lab-a"]]
    table = pq.read_table(out / "cross-validated" / "comparisons.parquet").to_pylist()
    assert {r["row_id"] for r in table} == {"lab-a", "lab-b", "other-a", "other-b", "third-a"}  # every row predicted
    in_sample = pq.read_table(out / "in-sample" / "comparisons.parquet").to_pylist()
    assert {r["row_id"] for r in in_sample} == {"lab-a", "other-a"}  # in-sample: the rows fitted to
    assert "5 rows from 3 publishers" in result.output
    assert "3 of the simulated rows name a GPU their figures contradict (gpu_doubt)" in result.output
