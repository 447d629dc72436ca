"""Run a plan: for each option, the fewest replicas meeting the SLO across seeds (and optionally the
highest rate they sustain), each evaluation a small sweep in ``OUT/evaluations/<option>/``.

.. code-block:: text

    OUT/plan.parquet, plan.md     one row per option, ranked: replicas, GPUs, $/h, $/M output tokens,
                                  the SLO figures (mean and 95% interval over seeds), max rate
    OUT/evaluations.parquet       every evaluation: option, replicas, rate, verdict, figures
    OUT/evaluations/<option>/replicas=N-rate=R/   each evaluation's sweep folder (runs, tables)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clustersim.config.loader import load_scenario
from clustersim.config.scenario import Scenario
from clustersim.errors import ConfigError, one_line
from clustersim.outdir import claimed_folder, new_default_folder, safe_name
from clustersim.plans.search import (
    Evaluation,
    ReplicaAnswer,
    SplitEvaluate,
    cheapest_split,
    fewest_replicas,
    highest_rate,
)
from clustersim.plans.spec import PlanOption, PlanSpec
from clustersim.plans.table import evaluations_table, format_plan_markdown, plan_table
from clustersim.plans.traffic import offered_rate_per_s, rate_overrides
from clustersim.runplan import GroupPlan, plan_run
from clustersim.sweeps.backends import BackendName
from clustersim.sweeps.execute import run_sweep
from clustersim.sweeps.points import override
from clustersim.sweeps.spec import SweepSpec
from clustersim.sweeps.store import write_table_atomically

OnEvaluation = Callable[[str, Evaluation], None]


@dataclass(frozen=True)
class OptionAnswer:
    """One option's answer: the fewest replicas (None: none found, ``reason`` why), the evaluation
    at that count, the highest rate it sustains (if asked), and every evaluation."""

    option: PlanOption
    hardware: str
    replicas: ReplicaAnswer
    answer: Evaluation | None
    max_rate_per_s: float | None
    evaluations: list[Evaluation]


@dataclass(frozen=True)
class PlanResult:
    out_dir: Path
    spec: PlanSpec
    target_rate_per_s: float
    answers: list[OptionAnswer]


@dataclass(frozen=True)
class Runner:
    """How evaluations run: where, on which backend, telling whom."""

    spec: PlanSpec
    base_path: Path
    out_dir: Path
    jobs: int | None
    backend: BackendName
    address: str | None
    on_evaluation: OnEvaluation | None

    def evaluator(
        self, option: PlanOption, base_rate_per_s: float, target_rate_per_s: float
    ) -> Callable[[int, float], Evaluation]:
        """The evaluation of ``option`` at a count and a factor of the target rate."""
        scenario = load_scenario(self.base_path, self._shared(option)).scenario

        def evaluate(num_replicas: int, factor: float) -> Evaluation:
            counts = {"cluster.num_replicas": num_replicas}
            return self._evaluate(option, scenario, counts, (num_replicas, None), target_rate_per_s / base_rate_per_s,
                                  factor, target_rate_per_s * factor)  # fmt: skip

        return evaluate

    def split_evaluator(
        self, option: PlanOption, base_rate_per_s: float, target_rate_per_s: float
    ) -> tuple[SplitEvaluate, float, float]:
        """The evaluation of a disaggregated ``option`` at (prefill, decode) replica counts and a factor
        of the target rate; and the weight of one prefill and of one decode replica: its price per hour
        (the plan's prices, else each GPU profile's), or its GPUs if either pool's GPU has no price."""
        loaded = load_scenario(self.base_path, self._shared(option))
        scenario = loaded.scenario
        groups = scenario.cluster.resolved_groups()
        if len(groups) != 2:
            raise ConfigError(
                f"plan option {option.name}", "cluster.groups",
                "a disaggregated option needs one prefill group and one decode group (the plan searches their counts)",
            )  # fmt: skip
        index = {group.role: i for i, group in enumerate(groups)}
        try:
            weights = self._replica_weights(plan_run(loaded).groups)
        except ConfigError:  # the option cannot run: its evaluations say why
            weights = {group.role: float(group.tensor_parallel * group.pipeline_parallel) for group in groups}

        def evaluate(num_prefill: int, num_decode: int, factor: float) -> Evaluation:
            counts = {f"cluster.groups.{index['prefill']}.count": num_prefill,
                      f"cluster.groups.{index['decode']}.count": num_decode,
                      "cluster.num_replicas": num_prefill + num_decode}  # fmt: skip
            return self._evaluate(option, scenario, counts, (num_prefill, num_decode),
                                  target_rate_per_s / base_rate_per_s, factor, target_rate_per_s * factor)  # fmt: skip

        return evaluate, weights["prefill"], weights["decode"]

    def _replica_weights(self, groups: tuple[GroupPlan, ...]) -> dict[str, float]:
        prices = {g.role: self.spec.prices_usd_per_gpu_hour.get(g.gpu.name, g.gpu.hourly_price_usd) for g in groups}
        gpus = {g.role: float(g.tensor_parallel * g.pipeline_parallel) for g in groups}
        if any(price is None for price in prices.values()):
            return gpus
        return {role: gpus[role] * (prices[role] or 0.0) for role in gpus}

    def _evaluate(
        self,
        option: PlanOption,
        scenario: Scenario,
        counts: dict[str, int],
        key: tuple[int, int | None],
        scale: float,
        factor: float,
        rate_per_s: float,
    ) -> Evaluation:
        """One evaluation: a sweep of the seeds at these replica ``counts`` and ``factor`` times the
        target rate (``rate_per_s``; ``scale``: the target over the base scenario's rate)."""
        overrides = {**shared_set(self.spec, option), **counts, **rate_overrides(scenario, scale * factor)}
        sweep = SweepSpec(name=f"{self.spec.name}-{option.name}", set=overrides, seeds=self.spec.seeds,
                          slo=self.spec.slo, prices_usd_per_gpu_hour=self.spec.prices_usd_per_gpu_hour)  # fmt: skip
        first, second = key
        where = f"replicas={first}" if second is None else f"prefill={first}-decode={second}"
        folder = self.out_dir / "evaluations" / safe_name(option.name) / f"{where}-rate={rate_per_s:.6g}"
        result = run_sweep(sweep, self.base_path, folder, source=f"plan option {option.name}", jobs=self.jobs,
                           backend=self.backend, address=self.address)  # fmt: skip
        stats = result.stats_table.to_pylist()[0]
        error = stats.get("error") if stats["num_ok"] < stats["num_seeds"] else None
        verdicts = [self.seed_meets(row) for row in result.rows]
        stats["slo_met_seeds_frac"] = sum(verdicts) / len(verdicts)
        split = None if second is None else (first, second)
        num_replicas = first if second is None else first + second
        evaluation = Evaluation(num_replicas, factor, all(verdicts), stats, error, split)
        if self.on_evaluation is not None:
            self.on_evaluation(option.name, evaluation)
        return evaluation

    def seed_meets(self, row: dict[str, Any]) -> bool:
        """One seed's verdict: it ran, met the targets at the percentile (if one is set), and enough
        of its requests met every target (if ``min_attainment_frac`` is set)."""
        if row.get("status") != "ok":
            return False
        if self.spec.slo.percentile is not None and row.get("slo_met") is not True:
            return False
        floor = self.spec.min_attainment_frac
        return floor is None or (row.get("slo_attainment_frac") or 0.0) >= floor

    def hardware(self, option: PlanOption) -> str:
        """The option's GPU (``mixed`` for a cluster of groups of several GPUs)."""
        cluster = load_scenario(self.base_path, self._shared(option)).scenario.cluster
        names = {group.hardware for group in cluster.resolved_groups()}
        return names.pop() if len(names) == 1 else "mixed"

    def disaggregated(self, option: PlanOption) -> bool:
        return load_scenario(self.base_path, self._shared(option)).scenario.disaggregated

    def _shared(self, option: PlanOption) -> list[str]:
        return [override(path, value) for path, value in shared_set(self.spec, option).items()]


def run_plan_spec(
    spec: PlanSpec,
    base_path: Path,
    out_dir: Path | None,
    *,
    source: str = "plan",
    jobs: int | None = None,
    backend: BackendName = "local",
    address: str | None = None,
    on_evaluation: OnEvaluation | None = None,
) -> PlanResult:
    """Answer the plan for every option and write its tables into ``out_dir`` (None: a new folder
    ``runs/plan-<name>-<time>``)."""
    if out_dir is None:
        out_dir = new_default_folder(f"plan-{spec.name}")
    with claimed_folder(out_dir):
        data = spec.model_dump(mode="json")
        data["base"] = str(base_path.resolve())
        (out_dir / "plan.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        runner = Runner(spec, base_path, out_dir, jobs, backend, address, on_evaluation)
        answers: list[OptionAnswer] = []
        target = spec.traffic.rate_per_s
        for option in spec.options:
            base_rate, target_rate = _rates(spec, base_path, option, source)
            target = target_rate if target is None else target
            answers.append(_answer(runner, option, base_rate, target_rate))
            _write(out_dir, spec, target_rate, answers)
    return PlanResult(out_dir, spec, target if target is not None else 0.0, answers)


def shared_set(spec: PlanSpec, option: PlanOption) -> dict[str, Any]:
    """The overrides every run of ``option`` shares. An option that gives the cluster groups (a
    prefill and a decode pool) has their total as its replica count, whatever the base says."""
    shared = {**spec.set, **option.set}
    groups = shared.get("cluster.groups")
    if isinstance(groups, list) and groups and "cluster.num_replicas" not in shared:
        counts = [group.get("count") for group in groups if isinstance(group, dict)]
        if all(isinstance(count, int) for count in counts):
            shared["cluster.num_replicas"] = sum(counts)
    return shared


def _rates(spec: PlanSpec, base_path: Path, option: PlanOption, source: str) -> tuple[float, float]:
    shared = [override(path, value) for path, value in shared_set(spec, option).items()]
    try:
        loaded = load_scenario(base_path, shared)
        base_rate = offered_rate_per_s(loaded.scenario, loaded.base_dir, loaded.source)
    except ConfigError as exc:
        raise ConfigError(source, f"options ({option.name})", one_line(str(exc))) from None
    return base_rate, spec.traffic.rate_per_s or base_rate


def _answer(runner: Runner, option: PlanOption, base_rate: float, target_rate: float) -> OptionAnswer:
    bounds = runner.spec.replicas
    evaluate: Callable[[int, float], Evaluation]
    if runner.disaggregated(option):
        split_evaluate, prefill_weight, decode_weight = runner.split_evaluator(option, base_rate, target_rate)
        replicas = cheapest_split(split_evaluate, bounds.max, prefill_weight, decode_weight)
        split = replicas.split or (0, 0)

        def at_split(num_replicas: int, factor: float) -> Evaluation:  # the answer's split at other rates
            return split_evaluate(*split, factor)

        evaluate = at_split
    else:
        evaluate = runner.evaluator(option, base_rate, target_rate)
        replicas = fewest_replicas(evaluate, bounds.min, bounds.max, bounds.start or bounds.min)
    evaluations = list(replicas.evaluations)
    answer = next((e for e in evaluations if e.num_replicas == replicas.num_replicas and e.met), None)
    max_rate = None
    if replicas.num_replicas is not None and runner.spec.max_rate is not None:
        setting = runner.spec.max_rate
        factor, more = highest_rate(evaluate, replicas.num_replicas, setting.tolerance_frac, setting.max_factor)
        evaluations.extend(more)
        max_rate = factor * target_rate
    return OptionAnswer(option, runner.hardware(option), replicas, answer, max_rate, evaluations)


def _write(out_dir: Path, spec: PlanSpec, target_rate: float, answers: list[OptionAnswer]) -> None:
    table = plan_table(spec, answers)
    write_table_atomically(table, out_dir / "plan.parquet")
    write_table_atomically(evaluations_table(spec, answers, target_rate), out_dir / "evaluations.parquet")
    (out_dir / "plan.md").write_text(format_plan_markdown(spec, table, target_rate) + "\n", encoding="utf-8")
