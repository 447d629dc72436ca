"""Resuming a corpus fit: each fit's outcome (the all-rows fit, every leave-one-publisher-out fold) is
kept as a JSON file under the run folder, keyed by everything it depends on, so that ``clustersim
validate --fit --out FOLDER`` given the same folder again reruns only the fits whose inputs changed
(a fit of the whole corpus runs for hours; an interrupted one resumes at the fold it was in). Each file also
names the parameters of its vector, so that a later fit can start where this one ended
(:func:`saved_values`, ``clustersim validate --fit --start-from FOLDER``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from clustersim.validation.corpusfit import FIT_FTOL, SOLVER, FitOutcome, FitParam, FitRow, fitted_metrics


def fit_key(profiles_hash: str, rows: Sequence[FitRow], params: Sequence[FitParam], start: np.ndarray,
            active: Sequence[int], iterations: int, jacobian_every: int) -> str:  # fmt: skip
    """A hash of what a fit's outcome depends on: the profiles, its rows as parsed and the metrics each is
    fitted on, the parameters, where it starts, which it moves and how the solver runs."""
    described = [[dataclasses.asdict(r.task), r.row.comparable_metrics, fitted_metrics(r.row)] for r in rows]
    settings = [list(active), iterations, jacobian_every, FIT_FTOL, SOLVER]
    material = json.dumps(
        [profiles_hash, described, [p.label for p in params], [float(v) for v in start], settings],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(material.encode()).hexdigest()


def cached_fit(folder: Path | None, name: str, key: str, run: Callable[[], FitOutcome],
               labels: Sequence[str] = ()) -> FitOutcome:  # fmt: skip
    """``run()``'s outcome, read from ``folder/name.json`` when that file holds the same ``key``, else
    computed and written there (atomically, with the parameters' ``labels``) before it is returned. No
    folder: always computed."""
    path = folder / f"{name}.json" if folder is not None else None
    if path is not None and path.exists():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
        if saved.get("key") == key:
            return FitOutcome(np.asarray(saved["x"], dtype=np.float64), int(saved["evaluations"]),
                              bool(saved["converged"]))  # fmt: skip
    outcome = run()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": key, "labels": list(labels), "x": [float(v) for v in outcome.x],
                  "evaluations": outcome.evaluations, "converged": outcome.converged}  # fmt: skip
        partial = path.with_suffix(".json.part")
        partial.write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.replace(partial, path)
    return outcome


def saved_values(folder: Path | None, name: str) -> dict[str, float]:
    """Where the fit kept as ``folder/name.json`` ended, by parameter label (solver units); empty with no
    folder, no such file or one that does not name its parameters (written before files did)."""
    if folder is None:
        return {}
    path = folder / f"{name}.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    labels, x = saved.get("labels") or [], saved.get("x") or []
    if len(labels) != len(x):
        return {}
    return {str(label): float(value) for label, value in zip(labels, x, strict=True)}
