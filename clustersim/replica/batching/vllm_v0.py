"""vLLM's V0 scheduler (Kwon et al., SOSP'23; vLLM <= 0.6 ``Scheduler._schedule_default``).

A step either prefills newly admitted prompts (running decodes pause for it) or, when nothing can
be admitted, decodes the running sequences. Swapped-out sequences come back before any new
admission.

Multi-step scheduling (``scheduler.num_scheduler_steps``, vLLM's ``--num-scheduler-steps``, vLLM PR
#7000, 0.5.4-0.10): a decode batch, once scheduled, runs that many steps before the scheduler runs
again; prompts that arrive meanwhile wait for the end of the run, and sequences swapped out come back
only then. The replica enforces it (:meth:`clustersim.replica.core.Core.mid_multi_step`): between a
run's boundaries its builder admits nothing and swaps nothing in, so this plan only decodes.

Pipeline parallelism: V0 runs one scheduler per stage (a virtual engine, ``max_num_seqs`` each:
``seqs_per_micro_batch``). The replica's one step stands for all of their micro-batches, so a prompt
step here pauses every decode where the other virtual engines would go on decoding (TPOT pessimistic).
"""

from __future__ import annotations

from clustersim.replica.batching.base import PolicyBase, StepBuilder


class VllmV0(PolicyBase):
    kind = "vllm_v0"
    multi_step = True
    seqs_per_micro_batch = True  # one Scheduler per pipeline stage (virtual engine), each max_num_seqs

    def plan(self, step: StepBuilder) -> None:
        step.admit(chunked=False)
        if step.num_prefills == 0:
            step.decode()
            step.swap_in()
