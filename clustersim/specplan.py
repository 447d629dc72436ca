"""Resolve a scenario's ``speculative`` section for one replica group: the proposer's model, its memory,
and the cost model that prices decode steps with speculation (:mod:`clustersim.cost.speculative`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from clustersim.architecture import GpuSpec, ModelShape, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from clustersim.config.catalogue import Catalogue
from clustersim.config.speculative import Speculative
from clustersim.cost import CostModel, RooflineCostModel
from clustersim.cost.speculative import SpeculativeCostModel, VerifyingCostModel
from clustersim.errors import ConfigError


@dataclass(frozen=True)
class Proposer:
    """The proposer on one GPU of a replica: its weights, its KV bytes per token, and its model (None:
    no GPU work, n-gram lookup)."""

    weight_bytes_per_gpu: float = 0.0
    kv_bytes_per_token_per_gpu: float = 0.0
    model: ModelShape | None = None


NO_PROPOSER = Proposer()


def proposer(config: Speculative, target: ModelShape, tp: int, pp: int, catalogue: Catalogue, source: str) -> Proposer:
    """What the proposer of ``config`` adds to a replica of ``target`` at ``tp`` x ``pp``.

    A draft model runs at the target's tensor parallelism (vLLM's default); an EAGLE head is one
    decoder layer of the target's shape, sharing its embeddings and LM head (Li et al., EAGLE, ICML'24):
    a layer's share of the target's weights and KV cache, priced with the LM head each draft step.
    """
    if config.kind == "ngram":
        return Proposer()
    if config.kind == "eagle":
        # a full-attention layer (EAGLE heads attend to the whole context), with a full layer's KV
        whole = dataclasses.replace(target, num_sliding_window_layers=0, sliding_window_tokens=0)
        head = dataclasses.replace(whole, name=f"{target.name} EAGLE head", num_layers=1, num_dense_layers=0)
        return Proposer(
            weight_bytes_per_gpu(target, tp, pp) * pp / target.num_layers,
            kv_bytes_per_token_per_gpu(whole, tp, pp) * pp / target.num_layers,
            head,
        )
    assert config.draft_model is not None
    draft = ModelShape.from_profile(catalogue.model(config.draft_model, source, "speculative.draft_model"))
    draft = draft.with_sliding_window_kv_share(target.sliding_window_kv_share)  # the same engine keeps both
    if draft.num_attention_heads % tp:
        raise ConfigError(
            source,
            "speculative.draft_model",
            f"{draft.name} runs at the target's tensor_parallel {tp}, which does not divide its "
            f"{draft.num_attention_heads} attention heads",
        )
    if draft.vocab_size != target.vocab_size:
        raise ConfigError(
            source,
            "speculative.draft_model",
            f"{draft.name}'s vocabulary ({draft.vocab_size}) is not {target.name}'s ({target.vocab_size}): "
            "a draft model must share the target's tokenizer",
        )
    return Proposer(weight_bytes_per_gpu(draft, tp, 1), kv_bytes_per_token_per_gpu(draft, tp, 1), draft)


def draft_gpu(gpu: GpuSpec) -> GpuSpec:
    """The GPU as the proposer's steps see it: its kernels and graph launches, none of the engine's
    per-step or per-sequence host work (the verify step pays that once)."""
    engine = dataclasses.replace(gpu.engine, per_seq_overhead_s=0.0, sampling_per_seq_s=0.0, host_overlap_frac=0.0)
    return dataclasses.replace(gpu, step_overhead_s=0.0, engine=engine)


def speculative_cost(
    config: Speculative, target_cost: CostModel, found: Proposer, gpu: GpuSpec, tp: int, tokens_per_step: float
) -> SpeculativeCostModel:
    """``target_cost`` with speculation on its decode steps, each a ``1 / tokens_per_step`` share of a
    verify cycle (the fastest request's pace: :meth:`Speculative.max_tokens_per_step`)."""
    if not hasattr(target_cost, "verify_step_shape"):  # every built-in cost model has it
        raise TypeError(f"{type(target_cost).__name__} cannot price a verify step")
    draft: CostModel | None = None
    if found.model is not None and isinstance(target_cost, RooflineCostModel):
        draft = RooflineCostModel(found.model, draft_gpu(gpu), tp, 1)
    verifying: VerifyingCostModel = target_cost  # type: ignore[assignment]
    return SpeculativeCostModel(verifying, draft, config.num_speculative_tokens, tokens_per_step)
