"""The corpus fit end to end: fit on all rows, then leave each publisher out, and write the profiles.

:func:`fit_corpus` returns the all-rows fit (what the shipped engine profiles carry), its in-sample
predictions, and every row's prediction by the fold that left its publisher out (what the docs
report). :func:`write_efficiency` puts the fitted scales into the engine profiles' YAML files.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clustersim.config.catalogue import Catalogue
from clustersim.sweeps.backends import default_jobs
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.corpusfit import (
    FAMILIES,
    SCALE_FIELDS,
    Atom,
    Evaluator,
    FitParam,
    FitRow,
    atom_scales,
    fit,
    fit_rows,
    natural,
    parameters,
    reference_engines,
    scratch_dir,
    solver_start,
)
from clustersim.validation.predict import Prediction
from clustersim.validation.rowscenario import row_scenario
from clustersim.validation.runcorpus import RowOutcome

OnProgress = Callable[[str], None]


@dataclass(frozen=True)
class CorpusFit:
    """The all-rows fit and the cross-validated predictions."""

    params: list[FitParam]
    values: list[float]  # natural units (scales)
    num_rows: dict[str, int]  # rows touching each parameter (by label)
    in_sample: list[RowOutcome]
    cross_validated: list[RowOutcome]
    skipped: list[RowOutcome]


def _touched(param: FitParam, rows: Sequence[FitRow]) -> bool:
    return any(param.touches_row(r) for r in rows)


def _outcomes(rows: Sequence[FitRow], predictions: dict[str, Prediction | None]) -> list[RowOutcome]:
    found = []
    for r in rows:
        predicted = predictions.get(r.row.row_id)
        status = "simulated" if predicted is not None else "failed"
        found.append(RowOutcome(r.row, status, "" if predicted is not None else "failed with the fitted profiles",
                                predicted or {}, {}))  # fmt: skip
    return found


def fit_corpus(
    rows: Sequence[CorpusRow],
    catalogue: Catalogue,
    jobs: int | None = None,
    max_iterations: int = 8,
    on_progress: OnProgress | None = None,
    fold_iterations: int | None = None,
    cross_validate: bool = True,
) -> CorpusFit:
    """Fit on every simulable row, then (``cross_validate``) once per publisher without its rows."""
    say = on_progress or (lambda _: None)
    built = [row_scenario(r, catalogue) for r in rows]
    skipped = [RowOutcome(b.row, "skipped", b.skip_reason or "", {}, {}) for b in built if b.mapping is None]
    frows = fit_rows(built, catalogue)
    params = parameters(frows)
    base = reference_engines(catalogue)
    scratch = scratch_dir()
    try:
        with ProcessPoolExecutor(max_workers=jobs or default_jobs()) as pool:

            def evaluator(subset: Sequence[FitRow], name: str) -> Evaluator:
                return Evaluator(subset, params, base, catalogue.root, pool, scratch / name)

            def progress(name: str) -> Callable[[int, float], None]:
                return lambda runs, cost: say(f"{name}: evaluation {runs}, sum |residual| {cost:.2f}")

            everything = evaluator(frows, "all")
            start = np.asarray([solver_start(p) for p in params])
            x_all = fit(everything, start, range(len(params)), max_iterations, progress("all rows"))
            in_sample = everything.predict(x_all, search=True)
            held_out: dict[str, Prediction | None] = {}
            for publisher in sorted({r.row.publisher for r in frows}) if cross_validate else ():
                train = [r for r in frows if r.row.publisher != publisher]
                held = [r for r in frows if r.row.publisher == publisher]
                fold_start = x_all.copy()
                for i, p in enumerate(params):
                    if _touched(p, held):
                        fold_start[i] = solver_start(p)
                active = [i for i, p in enumerate(params) if _touched(p, train)]
                fold = evaluator(train, f"without-{publisher}")
                iterations = fold_iterations or max_iterations
                x_fold = (
                    fit(fold, fold_start, active, iterations, progress(f"without {publisher}"))
                    if active
                    else fold_start
                )
                held_out.update(evaluator(held, f"held-{publisher}").predict(x_fold, search=True))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    counts = {p.label: sum(p.touches_row(r) for r in frows) for p in params}
    values = [natural(p, x) for p, x in zip(params, x_all, strict=True)]
    return CorpusFit(params, values, counts, _outcomes(frows, in_sample), _outcomes(frows, held_out), skipped)


def efficiency_yaml(result: CorpusFit, engine: str, source: str) -> str:
    """The ``efficiency:`` block of one engine profile holding the fitted scales, each with ``source`` and
    the factors it is the product of (with the rows each rests on)."""
    pairs = list(zip(result.params, result.values, strict=True))

    def cite(atom: Atom) -> str:
        factors = [f"{p.label} {v:.3g} ({result.num_rows[p.label]} rows)" for p, v in pairs if p.applies(atom)]
        return f"{source}; " + " x ".join(factors)

    text = ""
    for param, value in pairs:
        if param.engine == engine and param.kind == "frontend":
            rows = result.num_rows[param.label]
            text += f'frontend_fitted_per_request_s:\n  value: {value:.4g}\n  source: "{source}; {rows} served rows"\n'
    families: dict[str, list[str]] = {}
    for atom, value in atom_scales(result.params, result.values, engine).items():
        for name in SCALE_FIELDS[atom[2]]:
            line = f'    {name}:\n      value: {value:.4g}\n      source: "{cite(atom)}"'
            families.setdefault(atom[1], []).append(line)
    if families:
        text += "efficiency:\n"
    for family in FAMILIES:
        if family in families:
            text += f"  {family}:\n" + "\n".join(families[family]) + "\n"
    return text


def write_efficiency(result: CorpusFit, catalogue_root: Path, source: str) -> list[Path]:
    """Replace (or add) the ``efficiency:`` block of each fitted engine's YAML file under ``catalogue_root``."""
    written = []
    catalogue = Catalogue(catalogue_root)
    for engine in sorted({p.engine for p in result.params if p.engine is not None}):
        name = catalogue.engine(engine).name
        path = next(p for p in sorted((catalogue_root / "engines").glob("*.yaml")) if _profile_name(p) == name)
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"^efficiency:\n(?:[ #].*\n|\n)*", "", text, flags=re.MULTILINE)
        text = re.sub(r"^frontend_fitted_per_request_s:\n(?:[ #].*\n)*", "", text, flags=re.MULTILINE)
        path.write_text(text.rstrip("\n") + "\n" + efficiency_yaml(result, engine, source), encoding="utf-8")
        written.append(path)
    return written


def _profile_name(path: Path) -> str:
    found = re.search(r"^name:\s*(\S+)", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return found.group(1) if found else ""
