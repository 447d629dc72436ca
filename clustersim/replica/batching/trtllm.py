"""TensorRT-LLM's in-flight batching capacity policies (TensorRT-LLM docs: "Useful Runtime Options",
``tensorrt_llm.llmapi.SchedulerConfig``; the PyTorch backend's CapacityScheduler + MicroBatchScheduler).

``GUARANTEED_NO_EVICT`` (TensorRT-LLM's default) starts a request only when the KV blocks for its
prompt and its whole output are free on top of what the running requests will still need, so a
started request is never paused: modelled by reserving prompt + output on admission
(``whole_sequence_kv``). Every step decodes the running requests and adds whole prompts (context
requests) within ``max_num_tokens`` (the scenario's ``max_num_batched_tokens``). ``_chunked``:
context chunking on (``context_chunking_policy: FIRST_COME_FIRST_SERVED``, off by default), prompts
split to the tokens the step has left.

``MAX_UTILIZATION`` packs as many requests as fit now and pauses the most recently started ones
when the KV cache runs out: the rules of ``continuous`` (and of ``chunked_prefill`` with chunking),
registered under TensorRT-LLM's names.

With pipeline parallelism every micro-batch may hold ``max_batch_size`` requests and ``max_num_tokens``
tokens (``TrtGptModelInflightBatching``: ``mNumMicroBatches`` = the PP size, its capacity scheduler
sized ``getMaxBatchSize() * mNumMicroBatches``): ``seqs_per_micro_batch``.
"""

from __future__ import annotations

from clustersim.replica.batching.base import PolicyBase, StepBuilder
from clustersim.replica.batching.chunked_prefill import ChunkedPrefill
from clustersim.replica.batching.continuous import Continuous


class TrtllmNoEvict(PolicyBase):
    kind = "trtllm_no_evict"
    seqs_per_micro_batch = True
    whole_sequence_kv = True

    def plan(self, step: StepBuilder) -> None:
        step.decode()
        step.admit(chunked=False)


class TrtllmNoEvictChunked(PolicyBase):
    kind = "trtllm_no_evict_chunked"
    seqs_per_micro_batch = True
    whole_sequence_kv = True
    chunks_prompts = True

    def plan(self, step: StepBuilder) -> None:
        step.decode()
        step.continue_prefills()
        step.admit(chunked=True)


class TrtllmMaxUtilization(Continuous):
    kind = "trtllm_max_utilization"
    seqs_per_micro_batch = True


class TrtllmMaxUtilizationChunked(ChunkedPrefill):
    kind = "trtllm_max_utilization_chunked"
    seqs_per_micro_batch = True
