"""SGLang's default scheduler (``python/sglang/srt/managers/scheduler.py``, ``get_next_batch_to_run``).

A prefill batch runs whenever one can be formed, ahead of the running decodes, which pause for that
step (``enable_mixed_chunk`` is off by default): the prompt being chunked continues first, then
waiting requests join in order while the ``chunked_prefill_size`` budget (the scenario's
``max_num_batched_tokens``; SGLang's ``server_args`` default it to 8,192 tokens on 35-160 GB GPUs) and
the KV pool allow, the last one cut to the budget left. When no prefill can be formed the running
requests decode. The admission's reserve for the running requests' future tokens (``new_token_ratio``)
and the retraction of decodes when memory runs out are the ``sglang`` engine's
``scheduler.decode_reserve`` (:mod:`clustersim.replica.reservation`), applied by the builder's
``admit`` and ``decode`` for any policy that sets it.
"""

from __future__ import annotations

from clustersim.replica.batching.base import PolicyBase, StepBuilder


class SGLang(PolicyBase):
    kind = "sglang"
    chunks_prompts = True

    def plan(self, step: StepBuilder) -> None:
        step.continue_prefills()
        step.admit(chunked=True)
        if step.num_prefills == 0:
            step.decode()
            step.swap_in()
