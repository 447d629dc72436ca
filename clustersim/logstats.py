"""One pass over the step and memory logs, a record batch at a time: the totals that the invariant
checks and ``summary.json`` need, in memory independent of the run's length."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from clustersim.records import LEDGER_CATEGORIES, MEASURED

BATCH_ROWS = 262_144


def batches_of(source: pa.Table | Path) -> Iterable[pa.RecordBatch]:
    """The record batches of a table, or of a Parquet file read a batch at a time."""
    batches: Iterable[pa.RecordBatch]
    if isinstance(source, pa.Table):
        batches = source.to_batches()
    else:
        batches = pq.ParquetFile(source).iter_batches(batch_size=BATCH_ROWS)
    return batches


def _col(batch: pa.RecordBatch, name: str) -> NDArray[np.float64]:
    return np.asarray(batch.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


class StepTotals:
    """Per replica and overall totals of ``steps.parquet``, and the rows breaking a per-step rule."""

    def __init__(self, num_replicas: int) -> None:
        zeros = np.zeros(num_replicas)
        self.busy_s, self.num_steps, self.seq_steps = zeros.copy(), zeros.copy(), zeros.copy()
        self.preemptions, self.kv_peak_frac = zeros.copy(), zeros.copy()
        self.num_rows = 0
        self.num_swaps = 0
        self.emitted_tokens = 0
        self.over_seqs: tuple[int, int] | None = None  # (sequences, cap) of the step furthest over its replica's cap
        self.over_tokens: tuple[int, int] | None = None  # (tokens, budget) likewise (rows with 1 prefill aside)
        self.bad_emission = False
        self.bad_kv = False

    @classmethod
    def of(
        cls,
        source: pa.Table | Path,
        num_replicas: int,
        token_budgets: Sequence[int] | None = None,
        seq_caps: Sequence[int] | None = None,
    ) -> StepTotals:
        """Totals of ``source``; a step is checked against its replica's ``token_budgets`` and
        ``seq_caps`` (one per replica; no check where not given)."""
        totals = cls(num_replicas)
        unlimited = np.full(num_replicas, 2**62, dtype=np.int64)
        budgets = np.asarray(token_budgets, dtype=np.int64) if token_budgets is not None else unlimited
        caps = np.asarray(seq_caps, dtype=np.int64) if seq_caps is not None else unlimited
        for batch in batches_of(source):
            totals.add(batch, budgets, caps)
        return totals

    def add(self, batch: pa.RecordBatch, token_budgets: np.ndarray, seq_caps: np.ndarray) -> None:
        if batch.num_rows == 0:
            return
        self.num_rows += batch.num_rows
        n = self.busy_s.size
        replica = np.asarray(batch.column("replica").to_numpy(), dtype=np.int64)
        num_steps, num_seqs = _col(batch, "num_steps"), _col(batch, "num_seqs")
        decode, prefill_seqs = _col(batch, "num_decode_tokens"), _col(batch, "num_prefill_seqs")
        emitted = _col(batch, "num_emitted_tokens")
        self.busy_s += np.bincount(replica, weights=_col(batch, "duration_s"), minlength=n)
        self.num_steps += np.bincount(replica, weights=num_steps, minlength=n)
        self.seq_steps += np.bincount(replica, weights=num_seqs * num_steps, minlength=n)
        self.preemptions += np.bincount(replica, weights=_col(batch, "num_preemptions"), minlength=n)
        used, total = _col(batch, "kv_used_blocks"), _col(batch, "kv_total_blocks")
        peak = _col(batch, "kv_peak_used_blocks")
        np.maximum.at(self.kv_peak_frac, replica, peak / total)
        self.num_swaps += int(_col(batch, "num_swaps").sum())
        self.emitted_tokens += int((num_steps * emitted).sum())
        self.over_seqs = _furthest_over(num_seqs, seq_caps[replica], np.ones(num_seqs.size, bool), self.over_seqs)
        tokens = _col(batch, "num_prefill_tokens") + decode
        alone = prefill_seqs == 1  # a lone recompute may exceed the budget
        self.over_tokens = _furthest_over(tokens, token_budgets[replica], ~alone, self.over_tokens)
        self.bad_emission |= bool(np.any(emitted < decode) or np.any(emitted > decode + prefill_seqs))
        self.bad_kv |= bool(np.any(peak > total) or np.any(used < 0) or np.any(peak < used))


def _furthest_over(
    values: np.ndarray, limits: np.ndarray, checked: np.ndarray, found: tuple[int, int] | None
) -> tuple[int, int] | None:
    """(value, limit) of the row furthest over its limit among ``checked`` rows, or ``found`` if none is further."""
    excess = np.where(checked, values - limits, 0)
    k = int(np.argmax(excess))
    if excess[k] <= 0 or (found is not None and excess[k] <= found[0] - found[1]):
        return found
    return int(values[k]), int(limits[k])


class MemoryTotals:
    """Time-weighted sums of ``memory.parquet``'s ledger shares, and the rows breaking the ledger."""

    def __init__(self) -> None:
        self.num_rows = 0
        self.weight_s = 0.0
        self.weighted_share_s = dict.fromkeys(LEDGER_CATEGORIES, 0.0)
        self.weighted_used_s = 0.0
        self.peak_used_frac = -np.inf
        self.negative = False
        self.unbalanced = False

    @classmethod
    def of(cls, source: pa.Table | Path) -> MemoryTotals:
        totals = cls()
        for batch in batches_of(source):
            totals.add(batch)
        return totals

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.num_rows += batch.num_rows
        weight, capacity = _col(batch, "duration_s"), _col(batch, "capacity_bytes")
        parts = {name: _col(batch, name) for name in LEDGER_CATEGORIES}
        self.negative |= any(bool(np.any(part < -1e-6 * capacity)) for part in parts.values())
        self.unbalanced |= bool(np.any(np.abs(sum(parts.values()) - capacity) > 1e-9 * capacity))
        self.weight_s += float(weight.sum())
        for name, part in parts.items():
            self.weighted_share_s[name] += float((weight * part / capacity).sum())
        self.weighted_used_s += float((weight * (1.0 - _col(batch, "free_bytes") / capacity)).sum())
        peak = float((1.0 - _col(batch, "min_free_bytes") / capacity).max())
        self.peak_used_frac = max(self.peak_used_frac, peak)


def gap_bins_of(source: pa.Table | Path, measured_only: bool = False) -> dict[str, dict[int, list[float]]]:
    """``itl.parquet`` as ``{tenant: {bin: [num_gaps, sum_s, min_s, max_s]}}`` (a few rows per bin touched).

    A file written with a measurement window has a ``measured`` column: ``measured_only`` keeps the
    measured requests' gaps, else a tenant's measured and unmeasured gaps of one bin are merged.
    """
    table = source if isinstance(source, pa.Table) else pq.read_table(source)
    if measured_only and MEASURED.name in table.column_names:
        table = table.filter(table.column(MEASURED.name))
    columns = [table.column(name).to_pylist() for name in ("tenant", "bin", "num_gaps", "sum_s", "min_s", "max_s")]
    bins: dict[str, dict[int, list[float]]] = {}
    for tenant, index, count, sum_s, low_s, high_s in zip(*columns, strict=True):
        tenant_bins = bins.setdefault(tenant, {})
        entry = tenant_bins.get(index)
        if entry is None:
            tenant_bins[index] = [count, sum_s, low_s, high_s]
        else:
            tenant_bins[index] = [entry[0] + count, entry[1] + sum_s, min(entry[2], low_s), max(entry[3], high_s)]
    return bins
