"""Resuming a corpus fit from the outcomes kept under its run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from clustersim.validation.corpusfit import FitOutcome
from clustersim.validation.fitcache import cached_fit, saved_values


def _outcome() -> FitOutcome:
    return FitOutcome(np.array([0.1, -0.25, 1.5]), 7, True)


def test_a_kept_outcome_is_reused_while_its_key_is_the_same_and_recomputed_when_not(tmp_path):
    runs = []

    def run() -> FitOutcome:
        runs.append(1)
        return _outcome()

    first = cached_fit(tmp_path / "fits", "without-a", "key-1", run)
    again = cached_fit(tmp_path / "fits", "without-a", "key-1", run)
    assert len(runs) == 1
    np.testing.assert_array_equal(first.x, again.x)
    assert (again.evaluations, again.converged) == (7, True)
    cached_fit(tmp_path / "fits", "without-a", "key-2", run)  # the rows, profiles or settings changed
    assert len(runs) == 2
    assert json.loads((tmp_path / "fits" / "without-a.json").read_text())["key"] == "key-2"
    assert not list((tmp_path / "fits").glob("*.part"))


def test_a_damaged_file_is_recomputed_and_no_folder_keeps_nothing(tmp_path):
    (tmp_path / "without-a.json").write_text("{not json")
    runs = []
    cached_fit(tmp_path, "without-a", "k", lambda: runs.append(1) or _outcome())
    cached_fit(None, "without-a", "k", lambda: runs.append(1) or _outcome())
    assert len(runs) == 2
    assert json.loads((tmp_path / "without-a.json").read_text())["evaluations"] == 7


@pytest.mark.parametrize("seeds", [("1", "2")])
def test_the_key_is_the_same_in_every_process(seeds):
    """Sets in a row (its features) must not make the key depend on the process's hash seed."""
    script = textwrap.dedent(
        """
        import numpy as np
        from clustersim.config.catalogue import Catalogue
        from clustersim.cli_validate import default_corpus_dir
        from clustersim.validation.corpus import load_corpus
        from clustersim.validation.corpusfit import fit_rows, parameters
        from clustersim.validation.fitcache import fit_key
        from clustersim.validation.rowscenario import row_scenario
        catalogue = Catalogue.builtin()
        built = [row_scenario(r, catalogue) for r in load_corpus(default_corpus_dir())]
        built = [b for b in built if b.mapping is not None]
        chosen = [b for b in built if b.row.features][:4] + built[:4]
        assert any(b.row.features for b in chosen)
        frows = fit_rows(chosen, catalogue)
        params = parameters(frows)
        print(fit_key("p", frows, params, np.zeros(len(params)), [0, 1], 12, 3))
        """
    )
    keys = set()
    for seed in seeds:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        found = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        keys.add(found.stdout.strip())
    assert len(keys) == 1 and len(next(iter(keys))) == 64


def test_a_kept_fit_names_its_parameters_and_a_later_fit_reads_where_it_ended(tmp_path):
    cached_fit(tmp_path, "without-a", "k", _outcome, ["x.compute", "x.memory", "x.frontend"])
    assert saved_values(tmp_path, "without-a") == {"x.compute": 0.1, "x.memory": -0.25, "x.frontend": 1.5}
    assert saved_values(tmp_path, "without-b") == {}  # no such fit
    (tmp_path / "old.json").write_text(json.dumps({"key": "k", "x": [0.1], "evaluations": 1, "converged": False}))
    assert saved_values(tmp_path, "old") == {}  # written before fits named their parameters: not guessed
