"""Prompts cut from numbered documents (pure): block ids that equal-index requests share.

A tenant with ``documents`` sends as its ``k``-th request the leading tokens of document ``k``, as
SGLang's ``bench_serving --dataset-name random`` does (``sample_random_requests`` in
``python/sglang/bench_serving.py``: prompt ``k`` is the ``k``-th entry of a dataset shuffled with a
fixed seed, cut or repeated to a length drawn with a fixed seed). Two prompts of index ``k`` cut to
different lengths share their shorter one's tokens, so block ``b`` of document ``k`` has one id in
every run and a prefix cache finds what an earlier run left. Ids are negative and far below a
conversation's (:mod:`clustersim.workload.conversation`), so they never meet those or a trace's.

:func:`warm_segments` lays out, least recently used first, what the ``earlier_runs`` left in a prefix
cache: request by request, the blocks of its prompt's last partial segment and its output (which no
later request reuses) and then its prompt's blocks (under their document ids) from the last to the first,
so that a full cache evicts a prompt from its end, as both engines do: vLLM V1 frees a finished
request's blocks into the free queue in reverse (``vllm/v1/core/block_pool.py`` ``free_blocks``), and
SGLang's radix cache evicts leaves first (``python/sglang/srt/mem_cache/radix_cache.py`` ``evict``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from clustersim.architecture import blocks_for_tokens
from clustersim.config.workload import Tenant

IDS_PER_DOCUMENT = 2**24  # block ids of one document: 2**24 blocks of prompt
DOCUMENTS_PER_TENANT = 2**32
DOCUMENT_IDS_BASE = -(2**62)  # conversation ids reach -2**62 only after 2**42 conversations

WarmSegment = tuple[Hashable, int]  # (prefix-cache key, KV blocks), as the KV manager keys them


def document_block_ids(tenant_index: int, document: int, num_blocks: int) -> tuple[int, ...]:
    """The ids of the first ``num_blocks`` prefix blocks of document ``document`` of tenant ``tenant_index``."""
    if num_blocks > IDS_PER_DOCUMENT:
        raise ValueError(f"a prompt of {num_blocks} prefix blocks exceeds a document's {IDS_PER_DOCUMENT}")
    base = DOCUMENT_IDS_BASE - (tenant_index * DOCUMENTS_PER_TENANT + document) * IDS_PER_DOCUMENT
    return tuple(base - b for b in range(num_blocks))


def prompt_ids(tenant_index: int, document: int, prompt_tokens: int, prefix_block_tokens: int) -> tuple[int, ...]:
    """The prefix ids of a prompt of ``prompt_tokens`` cut from document ``document`` (whole segments only)."""
    return document_block_ids(tenant_index, document, prompt_tokens // prefix_block_tokens)


def warm_segments(
    tenants: Sequence[Tenant], prefix_block_tokens: int, block_size_tokens: int
) -> tuple[WarmSegment, ...]:
    """What the tenants' ``earlier_runs`` left in a prefix cache, least recently used first.

    Each earlier request adds one segment of its own for the rest of its prompt and its output, which
    holds memory but is never reused, and then its prompt's whole segments, last first (keyed
    ``("hash", id)``, as :meth:`clustersim.kvcache.manager.KVManager.segments` keys a request's ids).
    """
    segment_blocks = prefix_block_tokens // block_size_tokens
    out: list[WarmSegment] = []
    for tenant_index, tenant in enumerate(tenants):
        if tenant.documents is None:
            continue
        for run_index, run in enumerate(tenant.documents.earlier_runs):
            for k, (prompt, output) in enumerate(zip(run.prompt_tokens, run.output_tokens, strict=True)):
                ids = prompt_ids(tenant_index, k, prompt, prefix_block_tokens)
                rest = blocks_for_tokens(prompt + output, block_size_tokens) - len(ids) * segment_blocks
                if rest > 0:
                    out.append((("earlier", tenant_index, run_index, k), rest))
                out.extend((("hash", h), segment_blocks) for h in reversed(ids))
    return tuple(out)
