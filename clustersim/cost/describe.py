"""Plain-text views for the CLI: a step's breakdown and the catalogue's key numbers (pure functions)."""

from __future__ import annotations

from clustersim.architecture import EngineSpec, GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.cost.roofline import StepCost

GB = 1e9


def format_breakdown(cost: StepCost) -> str:
    """One row per op group: time, share of the step, FLOPs, bytes, achieved rates and bound."""
    lines = [f"{'op group':<18}{'time ms':>10}{'share':>8}{'GFLOP':>11}{'GB':>10}{'TFLOP/s':>9}{'GB/s':>9}  bound"]
    for op in cost.ops:
        share = op.time_s / cost.duration_s if cost.duration_s else 0.0
        flops_rate = op.flops / op.time_s / 1e12 if op.time_s and op.flops else 0.0
        byte_rate = op.bytes / op.time_s / GB if op.time_s and op.bytes else 0.0
        lines.append(
            f"{op.name:<18}{op.time_s * 1e3:>10.3f}{share * 100:>7.1f}%{op.flops / 1e9:>11.1f}{op.bytes / GB:>10.3f}"
            f"{flops_rate:>9.1f}{byte_rate:>9.0f}  {op.bound}"
        )
    lines.append(f"{'step':<18}{cost.duration_s * 1e3:>10.3f}{100.0:>7.1f}%")
    return "\n".join(lines)


def format_catalogue(catalogue: Catalogue) -> str:
    """Hardware, models and engines with their key numbers."""
    lines = [
        "hardware     memory   HBM TB/s  BF16 TFLOP/s  FP8 TFLOP/s  FP4 TFLOP/s  link GB/s  $/h",
    ]
    for name in catalogue.names("hardware"):
        gpu = GpuSpec.from_profiles(catalogue.hardware(name), catalogue.engine("vllm"))
        fp8 = f"{gpu.peak_fp8_flops_per_s / 1e12:.0f}" if gpu.peak_fp8_flops_per_s else "-"
        fp4 = f"{gpu.peak_fp4_flops_per_s / 1e12:.0f}" if gpu.peak_fp4_flops_per_s else "-"
        price = f"{gpu.hourly_price_usd:.2f}" if gpu.hourly_price_usd is not None else "-"
        lines.append(
            f"{name:<11}{gpu.memory_bytes / GB:>5.0f} GB{gpu.hbm_bandwidth_bytes_per_s / 1e12:>10.3f}"
            f"{gpu.peak_flops_per_s / 1e12:>14.1f}{fp8:>13}{fp4:>13}"
            f"{gpu.interconnect_bandwidth_bytes_per_s / GB:>11.0f}"
            f"{price:>6}"
        )
    lines.append("")
    lines.append("model             params B  active B  layers  hidden  heads/kv  KV KiB/token  weights  kind")
    for name in catalogue.names("model"):
        model = ModelShape.from_profile(catalogue.model(name))
        kind = "MoE " if model.is_moe else "dense "
        kind += "MLA" if model.is_mla else ("GQA" if model.num_kv_heads < model.num_attention_heads else "MHA")
        lines.append(
            f"{name:<17}{model.num_params() / 1e9:>9.2f}{model.num_active_params() / 1e9:>10.2f}{model.num_layers:>8}"
            f"{model.hidden_size:>8}{model.num_attention_heads:>6}/{model.num_kv_heads:<3}"
            f"{model.kv_bytes_per_token() / 1024:>12.1f}{model.weight_precision:>9}  {kind}"
        )
    lines.append("")
    lines.append(
        "engine       step ms  per-seq us  launch/layer us (eager, graph)  graphs up to  hidden  default policy"
    )
    footnote = False
    for name in catalogue.names("engine"):
        profile = catalogue.engine(name)
        engine = EngineSpec.from_profile(profile)
        graphs = f"{engine.cuda_graph_max_seqs} {'tokens' if engine.cuda_graph_mixed_steps else 'seqs'}"
        rule = profile.kv.gpu_memory_rule if profile.kv is not None else None
        if rule is not None:  # the current release sizes them by the GPU's memory (shown: the most)
            graphs = f"{max(t.graph_seqs for t in rule.value.tiers)} seqs*"
            footnote = True
        policy = profile.scheduler.policy if profile.scheduler is not None else None
        lines.append(
            f"{name:<11}{profile.step_overhead_s.value * 1e3:>9.2f}{engine.per_seq_overhead_s * 1e6:>12.1f}"
            f"{engine.launch_overhead_per_layer_eager_s * 1e6:>16.1f}, "
            f"{engine.launch_overhead_per_layer_graph_s * 1e6:<14.1f}"
            f"{graphs:>12}{engine.host_overlap_frac * 100:>7.0f}%  {policy.value if policy else '-'}"
        )
    if footnote:
        lines.append(
            "* the most; by the GPU's memory and TP degree, from the release the profile's kv.gpu_memory_rule names"
        )
    return "\n".join(lines)
