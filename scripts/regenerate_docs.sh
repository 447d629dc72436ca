#!/usr/bin/env bash
# Rewrite every table of measured figures in README.md and docs/ with the command that measures it.
# Each command writes its own block (--doc FILE#name) and names itself under the table. Tables whose
# scenarios replay the public traces in ../shared/ground_truth need that folder next to the checkout.
# Takes about 15 minutes on 2 cores (the benchmark's 1M-request cases are most of it), plus the corpus fit
# (continued from validation/fit/: its folds' evaluations, up to two hours).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
LAT="TTFT p50 ms,TTFT p99 ms,TPOT p50 ms,TPOT p99 ms,E2E p99 s,out tok/s,SLO met %"

# docs/validation.md and the engine profiles: the public corpus, the engines' efficiency scales fitted to it
# and every row predicted with its publisher left out, each fit continued from where the shipped one ended
# (validation/fit/, kept for the next refit); first, since every other figure is priced with the profiles it
# writes. From scratch instead (no --start-from): two runs, the second continuing the first, about three and a
# half hours on 2 cores.
# With --skip-fit, the fit is taken as done (run apart, its profiles, tables, figure and fits copied in as
# validation/fit/README.md says) and every other figure is rewritten with the profiles as they are.
if [ "${1:-}" != "--skip-fit" ]; then
  clustersim validate --fit --start-from validation/fit --write-profiles --quiet --out "$out/corpus-fit" \
    --doc docs/validation.md
  cp "$out/corpus-fit/cross-validated/parity.png" docs/figures/validation-parity.png
  cp "$out/corpus-fit/fits/"*.json validation/fit/fits/
fi
# the rows whose GPU is in doubt (gpu_doubt), on the GPU their figures match and on the one their source names
clustersim validate --rows 'gpustack-qwen3-14b*h100*' --rows 'gpustack-qwen3-32b*h100*' --hardware H100-PCIe --quiet \
  --out "$out/doubt" --doc 'docs/validation.md#gpu-doubt'
clustersim validate --rows 'gpustack-qwen3-14b*h100*' --rows 'gpustack-qwen3-32b*h100*' --quiet \
  --out "$out/doubt-as-named" --doc 'docs/validation.md#gpu-doubt-sxm'

# README and docs/sweeps.md: the capacity question (the second run reuses every run of the first)
clustersim plan chat-60rps --out "$out/plan" --doc README.md#plan
clustersim plan chat-60rps --out "$out/plan" --doc docs/sweeps.md#plan

# docs/scenarios.md: routers on the Azure conversation trace
clustersim compare azure-conv-replay \
  --vary router.kind=round_robin,random,least_outstanding,vllm_dp,least_kv,power_of_two,affinity \
  --columns "$LAT" --out "$out/routers" --doc docs/scenarios.md#routers

# docs/scenarios.md: a measurement window on a short and a long run
clustersim compare default --set workload.tenants.0.arrival.rate_per_s=60 --vary stop.max_requests=5000,60000 \
  --vary 'metrics={warmup_requests: 0},{warmup_requests: 1000, cooldown_requests: 1000}' \
  --columns "measured,TTFT p99 ms,TPOT p50 ms,TPOT p99 ms,ITL p99 ms,SLO met %,out tok/s" --out "$out/window" \
  --doc docs/scenarios.md#window

# docs/replica.md: policies, chunk budgets, static batch wait
clustersim compare azure-conv-replay --vary scheduler.policy=continuous,vllm_v0,vllm_v1 \
  --set scheduler.max_num_batched_tokens=16384 --columns "$LAT" --out "$out/policies" --doc docs/replica.md#policies
clustersim compare azure-conv-replay --vary scheduler.policy=static --set scheduler.max_num_batched_tokens=262144 \
  --columns "$LAT" --out "$out/static" --doc docs/replica.md#static
clustersim compare azure-conv-replay --vary scheduler.max_num_batched_tokens=512,2048,8192 \
  --set scheduler.policy=chunked_prefill --columns "$LAT" --out "$out/chunks" --doc docs/replica.md#chunks
clustersim compare azure-conv-replay --vary scheduler.num_scheduler_steps=1,4,8,16 \
  --set scheduler.policy=vllm_v0 --set scheduler.max_num_batched_tokens=16384 --columns "$LAT" --out "$out/multistep" \
  --doc docs/replica.md#multistep
clustersim compare streaming-smoothness \
  --vary 'scheduler={policy: vllm_v0, max_num_seqs: 256, max_num_batched_tokens: 8192},{policy: vllm_v1, max_num_seqs: 256, max_num_batched_tokens: 8192},{policy: chunked_prefill, max_num_seqs: 256, max_num_batched_tokens: 512}' \
  --columns "TTFT p99 ms,TPOT p50 ms,TPOT p99 ms,ITL p50 ms,ITL p99 ms,ITL max ms,SLO met %" --out "$out/itl" \
  --doc docs/replica.md#itl
clustersim compare static-batch-wait --vary scheduler.batch_wait_s=0,1,4 \
  --columns "mean batch,busy %,TTFT p50 ms,TTFT p99 ms" --out "$out/wait" --doc docs/replica.md#batch-wait

# docs/kv-memory.md: prefix caching with affinity, paged vs contiguous
clustersim compare mooncake-conv-replay --vary 'router={kind: least_outstanding},{kind: affinity, prefix_blocks: 2}' \
  --columns "prefix hit %,TTFT p50 ms,TTFT p99 ms,SLO met %" --out "$out/prefix" --doc docs/kv-memory.md#prefix
clustersim compare prefix-burst --vary kv.prefix_caching=true,false \
  --columns "prefix hit %,TTFT p50 ms,TTFT p99 ms,out tok/s" --out "$out/burst" --doc docs/kv-memory.md#prefix-burst
clustersim compare multi-turn-chat --vary kv.prefix_caching=true,false \
  --columns "prefix hit %,TTFT p50 ms,TTFT p99 ms,ITL p99 ms,SLO met %,out tok/s" --out "$out/multi-turn" \
  --doc docs/kv-memory.md#multi-turn
KV="KV stored of used %,KV waste %,mean batch,out tok/s,TTFT p99 ms,SLO met %"
clustersim compare kv-paged --vary kv.allocator=paged,contiguous --vary workload.tenants.0.arrival.rate_per_s=4,6 \
  --columns "$KV" --out "$out/kv" --doc docs/kv-memory.md#paged-vs-contiguous
clustersim compare kv-paged --vary kv.allocator=contiguous --set kv.reserve=max_model_len \
  --columns "$KV" --out "$out/kv-len" --doc docs/kv-memory.md#max-model-len

# docs/lifecycle.md: a failure retried or lost, and the replicas that keep the SLO when one fails
clustersim compare replica-failure --vary faults.on_failure=retry,lose \
  --columns "completed,lost,retried,up %,TTFT p99 ms,TPOT p99 ms,SLO met %" --out "$out/failure" \
  --doc docs/lifecycle.md#one-failure
clustersim sweep scenarios/sweeps/failure-headroom.yaml --out "$out/headroom" --doc docs/lifecycle.md#headroom
clustersim plan failover-60rps --out "$out/failover" --doc docs/lifecycle.md#failover-plan
clustersim run replica-failure --out "$out/replica-failure" --quiet
clustersim report "$out/replica-failure" --out "$out/replica-failure-figures" \
  && cp "$out/replica-failure-figures/lifecycle.png" docs/figures/replica-failure.png
clustersim compare autoscaled-diurnal --set autoscaler=null --vary cluster.num_replicas=2,3,4 \
  --columns "TTFT p99 ms,TPOT p99 ms,ITL p99 ms,SLO met %" --out "$out/fixed-pools" --doc docs/lifecycle.md#fixed-pools
clustersim compare autoscaled-diurnal --vary autoscaler.target_outstanding_per_replica=20,40,80 \
  --columns "replicas,GPU-h,GPU-h saved %,TTFT p99 ms,TPOT p99 ms,ITL p99 ms,SLO met %" --out "$out/autoscaled" \
  --doc docs/lifecycle.md#autoscaled
clustersim run autoscaled-diurnal --out "$out/autoscaled-diurnal" --quiet
clustersim report "$out/autoscaled-diurnal" --out "$out/autoscaled-diurnal-figures" \
  && cp "$out/autoscaled-diurnal-figures/lifecycle.png" docs/figures/autoscaled-diurnal.png

# docs/disaggregation.md: pools that scale apart over an hour-long day, against fixed pools
clustersim compare disaggregated-diurnal --set disaggregation.autoscaler=null \
  --vary cluster.groups.0.count=1,2,3 --vary cluster.groups.1.count=2,3 \
  --columns "GPUs,TTFT p99 ms,TPOT p99 ms,SLO met %" --out "$out/dd-fixed" --doc docs/disaggregation.md#diurnal-fixed
clustersim compare disaggregated-diurnal --vary disaggregation.autoscaler.decode.target_kv_used_frac=0.1,0.15,0.2,0.3 \
  --columns "prefill replicas,decode replicas,GPU-h,GPU-h saved %,TTFT p99 ms,TPOT p99 ms,SLO met %" \
  --out "$out/dd-scaled" --doc docs/disaggregation.md#diurnal-scaled
clustersim run disaggregated-diurnal --out "$out/disaggregated-diurnal" --quiet
clustersim report "$out/disaggregated-diurnal" --out "$out/disaggregated-diurnal-figures" \
  && cp "$out/disaggregated-diurnal-figures/lifecycle.png" docs/figures/disaggregated-diurnal.png

# docs/disaggregation.md: links, DistServe's result both ways, the pools' sizes, the KV ledger's figure
clustersim compare disaggregated --vary disaggregation.link.kind=nvlink,infiniband,roce,pcie \
  --columns "TTFT p50 ms,TTFT p99 ms,TPOT p99 ms,link wait p99 ms,KV transfer p99 ms,SLO met %" \
  --out "$out/links" --doc docs/disaggregation.md#links
clustersim compare disaggregated --vary 'disaggregation.nodes=null,{gpus_per_node: 8},{gpus_per_node: 2}' \
  --columns "TTFT p50 ms,TTFT p99 ms,TPOT p99 ms,link wait p99 ms,KV transfer p99 ms,SLO met %" \
  --out "$out/nodes" --doc docs/disaggregation.md#nodes
clustersim plan disagg-long-prompts --out "$out/disagg-long" --doc docs/disaggregation.md#long-prompts
clustersim plan disagg-short-prompts --out "$out/disagg-short" --doc docs/disaggregation.md#short-prompts
clustersim compare disaggregated --set workload.tenants.0.arrival.rate_per_s=20 \
  --vary cluster.groups.0.count=2,3 --vary cluster.groups.1.count=1,2 \
  --columns "TTFT p50 ms,TTFT p99 ms,TPOT p99 ms,decode wait p99 ms,prefill busy %,decode busy %,SLO met %" \
  --out "$out/pools" --doc docs/disaggregation.md#pools
clustersim run disaggregated --out "$out/disaggregated" --quiet
clustersim report "$out/disaggregated" --out "$out/disaggregated-figures" \
  && cp "$out/disaggregated-figures/kv_memory.png" docs/figures/disaggregated-memory.png \
  && cp "$out/disaggregated-figures/transfers.png" docs/figures/disaggregated-transfers.png

# docs/speculative.md: ITL with and without speculative decoding from one user to many
clustersim compare speculative-decoding --set speculative=null --vary workload.tenants.0.arrival.num_users=1,8,32,128,256 \
  --columns "ITL p50 ms,TPOT p50 ms,TTFT p50 ms,out tok/s" --out "$out/no-spec" --doc docs/speculative.md#no-speculation
clustersim compare speculative-decoding --vary workload.tenants.0.arrival.num_users=1,8,32,128,256 \
  --columns "ITL p50 ms,TPOT p50 ms,TTFT p50 ms,out tok/s" --out "$out/eagle" --doc docs/speculative.md#eagle
clustersim plan spec-latency-tier --out "$out/spec-plan" --doc docs/speculative.md#latency-tier
for tenant in code chat; do  # docs/speculative.md: each tenant's latency when acceptance differs by tenant
  clustersim compare speculative-tenants --tenant "$tenant" --vary workload.tenants.1.arrival.num_users=1,8,32 \
    --columns "completed,TPOT p50 ms,TPOT p99 ms,ITL p50 ms,out tok/s" --out "$out/spec-$tenant" \
    --doc "docs/speculative.md#tenants-$tenant"
done
clustersim sweep scenarios/sweeps/speculative-users.yaml --out "$out/spec-users" --quiet
clustersim report "$out/spec-users" --out "$out/spec-users-figures" \
  && cp "$out/spec-users-figures/latency_vs_achieved.png" docs/figures/speculative-users.png

# docs/validation.md: kernels and published serving results
clustersim validate-cost ../shared/ground_truth --kernels validation/kernels --out "$out/kernels" --doc docs/validation.md#kernels \
  && cp "$out/kernels/cost-validation.png" docs/figures/cost-validation.png
clustersim validate-cost ../shared/ground_truth --published --doc docs/validation.md#published

# docs/validation.md: calibrating the trtllm engine on a third of TensorRT-LLM's published tables
# (gptSessionBenchmark without paged KV held each batch whole: its cache is allocated for the engine's
# max batch x max sequence, NVIDIA/TensorRT-LLM issue #211, so the model gets the memory to hold it)
clustersim calibrate docs/data/trtllm-published.csv --engine trtllm --set scheduler.policy=static --set cluster.frontend=false \
  --set kv.gpu_memory_frac=0.99 \
  --train-frac 0.33 --seed 0 --out "$out/trtllm-host.yaml" --doc docs/validation.md#calibrate
clustersim calibrate docs/data/trtllm-published.csv --engine trtllm --set scheduler.policy=static --set cluster.frontend=false \
  --set kv.gpu_memory_frac=0.99 \
  --train-frac 0.33 --seed 0 --fit-gpu --out "$out/trtllm-gpu.yaml" --doc docs/validation.md#calibrate-gpu

# docs/speed.md: the benchmark
clustersim bench --sizes 10k,100k,1M --doc docs/speed.md#bench
clustersim bench --cases azure-replay --doc docs/speed.md#replay
