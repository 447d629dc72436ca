"""Rows' predictions kept across the fits of a refit: exact reuse, and only for rows whose values repeat."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_corpusfit import BASE as CORPUS_ROW
from test_corpusfit import CATALOGUE

from clustersim.validation import corpusfit, crossval
from clustersim.validation.corpusfit import Evaluator, fit_rows, parameters, reference_engines
from clustersim.validation.crossval import fit_corpus
from clustersim.validation.rowmemo import RowMemo
from clustersim.validation.rowscenario import row_scenario

BASE = dataclasses.replace(CORPUS_ROW, publisher="a", prompt_tokens=256, output_tokens=64, num_requests=16)


def test_the_memo_keeps_the_last_used_predictions():
    memo = RowMemo(2)
    memo.keep("a", {"x": 1.0})
    memo.keep("b", None)  # a row that failed is kept as such
    assert memo.lookup("a") == (True, {"x": 1.0})  # a is now the last used: b goes first
    memo.keep("c", {"x": 3.0})
    assert memo.lookup("b") == (False, None)
    assert memo.lookup("c") == (True, {"x": 3.0}) and len(memo) == 2
    assert (memo.hits, memo.misses) == (2, 1)
    with pytest.raises(ValueError, match="at least one"):
        RowMemo(0)


@pytest.fixture
def rows():
    found = [
        dataclasses.replace(BASE, row_id="h100", load_kind="rate", load=4.0),  # served: through its front end
        dataclasses.replace(BASE, row_id="a100", gpu="A100-80GB"),
        dataclasses.replace(BASE, row_id="sglang", engine="sglang", engine_version="0.5.6"),
    ]
    return fit_rows([row_scenario(r, CATALOGUE) for r in found], CATALOGUE)


def _counting(monkeypatch) -> list[list[str]]:
    runs: list[list[str]] = []
    real = corpusfit.predict_all

    def counted(tasks, root, pool):
        runs.append(sorted(t.row_id for t in tasks))
        return real(tasks, root, pool)

    monkeypatch.setattr(corpusfit, "predict_all", counted)
    return runs


def test_a_row_is_run_again_only_where_the_values_it_reads_moved(rows, monkeypatch, tmp_path):
    params = parameters(rows)
    labels = [p.label for p in params]
    memo = RowMemo(64)
    fresh = Evaluator(rows, params, reference_engines(CATALOGUE), CATALOGUE.root, None, tmp_path / "fresh")
    kept = Evaluator(rows, params, reference_engines(CATALOGUE), CATALOGUE.root, None, tmp_path / "kept", memo)
    other = Evaluator(rows[:2], params, reference_engines(CATALOGUE), CATALOGUE.root, None, tmp_path / "o", memo)
    x = np.zeros(len(params))
    truth = fresh.predict(x)
    runs = _counting(monkeypatch)
    assert kept.predict(x) == truth and runs == [["a100", "h100", "sglang"]]
    assert other.predict(x) == {k: truth[k] for k in ("h100", "a100")} and len(runs) == 1  # another fit: reused
    moved = x.copy()
    moved[labels.index("all.compute.ampere")] = 0.2  # read by the A100 row only
    assert kept.predict(moved)["a100"] != truth["a100"] and runs[-1] == ["a100"]
    assert kept.predict(moved) == fresh.predict(moved)  # the same predictions as runs of every row
    nudged = kept.predict(x, [rows[0], rows[2]], {("vllm-v1", "hopper", "memory"): 0.05})  # a Jacobian's step
    assert runs[-1] == ["h100"] and nudged["sglang"] == truth["sglang"]
    before = len(runs)
    assert kept.predict(x, search=True) == truth and len(runs) == before  # no row has p99 bounds: as fitted
    front = x.copy()
    front[labels.index("vllm-v1.frontend_latency")] = 5.0  # vLLM's front end: read by its served row only
    kept.predict(front)
    assert runs[-1] == ["h100"]


class _NoMemo(RowMemo):
    """A memo that keeps nothing: every row runs, as before there was one."""

    def lookup(self, key):
        self.misses += 1
        return False, None


def test_a_refit_with_the_memo_ends_where_one_without_it_does(monkeypatch, tmp_path):
    settings = [("a", 128, 256), ("a", 2048, 8), ("b", 512, 64), ("c", 256, 128)]
    rows = [
        dataclasses.replace(BASE, row_id=f"{p}-{i}", publisher=p, prompt_tokens=n, output_tokens=m, gpu="A100-80GB",
                            metrics={"output_tok_per_s": 1500.0 + 100 * i})
        for i, (p, n, m) in enumerate(settings)
    ]  # fmt: skip
    made: list[RowMemo] = []

    class _Kept(RowMemo):
        def __init__(self, max_entries: int) -> None:
            super().__init__(max_entries)
            made.append(self)

    monkeypatch.setattr(crossval, "RowMemo", _Kept)
    kept = fit_corpus(rows, CATALOGUE, jobs=1, max_iterations=3, fold_iterations=3)
    assert made[0].hits > 0  # the folds' runs at the all-rows fit's values were answered from it
    monkeypatch.setattr(crossval, "RowMemo", _NoMemo)
    every = fit_corpus(rows, CATALOGUE, jobs=1, max_iterations=3, fold_iterations=3)
    assert kept.values == every.values
    assert [o.predicted for o in kept.cross_validated] == [o.predicted for o in every.cross_validated]
