"""The run printout: a short, aligned text table of a run's summary (what ``clustersim run`` prints)."""

from __future__ import annotations

from typing import Any


def _fmt(value: Any, scale: float = 1.0, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value * scale:.{digits}f}"


def format_window(window: dict[str, Any]) -> str:
    """One line saying which requests a windowed summary measures."""
    settings = [
        f"{label} {window[key]:g}{unit}"
        for key, label, unit in (
            ("warmup_s", "warmup", " s"),
            ("cooldown_s", "cooldown", " s"),
            ("warmup_requests", "warmup", " requests"),
            ("cooldown_requests", "cooldown", " requests"),
        )
        if window[key]
    ]
    arriving = ""
    if window["num_measured"]:
        arriving = f" (arriving {window['first_measured_arrival_s']:.3f}-{window['last_measured_arrival_s']:.3f} s)"
    return (
        f"window ({', '.join(settings)}): {window['num_measured']} requests measured{arriving}, "
        f"{window['num_excluded']} left out"
    )


def format_summary(summary: dict[str, Any]) -> str:
    """A short, aligned text table of a run's summary."""
    counts = summary["num_requests"]
    lines = [f"scenario {summary['scenario']}  seed {summary['seed']}  makespan {summary['makespan_s']:.3f} s"]
    if "window" in summary:
        lines.append(format_window(summary["window"]))
    lines += [
        f"{'measured requests' if 'window' in summary else 'requests'}: {counts['arrived']} arrived, "
        f"{counts['completed']} completed, {counts['rejected']} rejected, {counts['unfinished']} unfinished"
        + (f", {counts['lost']} lost" if counts.get("lost") else ""),
        f"{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    rows = (
        ("ttft_s", "TTFT ms"),
        ("tpot_s", "TPOT ms"),
        ("itl_s", "ITL ms"),  # over every gap between two tokens
        ("max_itl_s", "max ITL ms"),  # each request's longest gap
        ("e2e_s", "E2E ms"),
        ("queue_s", "queue ms"),
    )
    for name, label in rows:
        row = summary[name]
        lines.append(f"{label:<10}" + "".join(f"{_fmt(row[k], 1e3, 1):>10}" for k in ("mean", "p50", "p90", "p99")))
    replicas = summary["replicas"]
    over = ";"
    if "window" in summary:
        over = f" (measured, over their {summary['window']['span_s']:.3f} s of arrivals); whole run:"
    lines.append(
        f"throughput: {_fmt(summary['output_tokens_per_s'], digits=1)} output tok/s, "
        f"{_fmt(summary['requests_per_s'], digits=2)} req/s{over} busy {_fmt(replicas['mean_busy_frac'], 100, 1)}%, "
        f"mean batch {_fmt(replicas['mean_batch_seqs'], digits=1)} seqs, "
        f"KV peak {_fmt(replicas['kv_peak_used_frac'], 100, 1)}%, preemptions {replicas['num_preemptions']}"
    )
    if "frontend" in summary:
        front = summary["frontend"]
        busy, busiest = _fmt(front["mean_busy_frac"], 100, 1), _fmt(front["max_busy_frac"], 100, 1)
        delay, longest = _fmt(front["mean_delay_s"], 1e3, 1), _fmt(front["max_delay_s"], 1e3, 1)
        lag, most = _fmt(front["mean_stream_lag_s"], 1e3, 1), _fmt(front["max_stream_lag_s"], 1e3, 1)
        lines.append(
            f"front end (API server): {busy}% busy (max {busiest}%), "
            f"{delay} ms mean from arrival to the engine (max {longest}), "
            f"last tokens {lag} ms late to the client (max {most})"
        )
    for cache in summary.get("kv_cache", [])[:1]:
        lines.append(_kv_cache_line(cache, len(summary.get("kv_cache", []))))
    if "faults" in summary:
        faults = summary["faults"]
        lines.append(
            f"faults: {_count(faults['num_failures'], 'failure')} held {faults['num_requests_held']} requests: "
            f"{faults['num_requests_retried']} retried, {faults['num_requests_lost']} lost; "
            f"{_count(faults['num_restarts'], 'restart')}; "
            f"replicas up {_fmt(faults['availability_frac'], 100, 1)}% of the time; "
            f"GPU-hours up {faults['up_gpu_hours']:.2f}, starting {faults['starting_gpu_hours']:.2f}, "
            f"down {faults['down_gpu_hours']:.2f}"
        )
    if "disaggregation" in summary:
        lines.append(_transfers_line(summary["disaggregation"]))
    if "speculative" in summary:
        spec = summary["speculative"]
        draft = f" ({spec['draft_model']})" if spec.get("draft_model") else ""
        head = f"speculative decoding: {spec['kind']}{draft}, {spec['num_speculative_tokens']} drafts a step"
        if "tenants" in spec:
            by_tenant = ", ".join(
                f"{name} {t['tokens_per_verify_step']:.2f} ({_rate(t['acceptance_rate'])})"
                for name, t in spec["tenants"].items()
            )
            lines.append(f"{head}; tokens per verify step by tenant (acceptance): {by_tenant}")
        else:
            lines.append(
                f"{head} accepted at {spec['acceptance_rate']:g}: {spec['tokens_per_verify_step']:.2f} tokens per "
                "verify step"
            )
    if "autoscaler" in summary:
        scaler = summary["autoscaler"]
        lines.append(
            f"autoscaler: {_count(scaler['num_starts'], 'start')}, {_count(scaler['num_stops'], 'stop')}; "
            f"{_fmt(scaler['mean_replicas_provisioned'], digits=2)} replicas provisioned on average; "
            f"{scaler['provisioned_gpu_hours']:.2f} GPU-hours against {scaler['fixed_pool_gpu_hours']:.2f} for the "
            f"fixed pool ({_fmt(scaler['gpu_hours_saved_frac'], 100, 1)}% saved)"
        )
        for role, pool in scaler.get("pools", {}).items():
            lines.append(
                f"  {role} pool: {_count(pool['num_starts'], 'start')}, {_count(pool['num_stops'], 'stop')}; "
                f"{_fmt(pool['mean_replicas_provisioned'], digits=2)} replicas provisioned on average; "
                f"{pool['provisioned_gpu_hours']:.2f} of {pool['fixed_pool_gpu_hours']:.2f} GPU-hours"
            )
    if "slo" in summary:
        slo = summary["slo"]
        targets = ", ".join(f"{k} <= {v}" for k, v in slo["targets"].items())
        if slo.get("tenant_targets"):
            per_tenant = "; ".join(
                f"{tenant}: " + ", ".join(f"{k} <= {v}" for k, v in t.items())
                for tenant, t in slo["tenant_targets"].items()
            )
            targets = f"{targets}; {per_tenant}" if targets else per_tenant
        lines.append(
            f"SLO ({targets}): {_fmt(slo['attainment_frac'], 100, 1)}% of requests met it; "
            f"goodput {_fmt(slo['goodput_requests_per_s'], digits=2)} req/s"
        )
        if "percentile_met" in slo:
            shown = ", ".join(
                f"{k} {_fmt(v, 1e3, 1)} ms" + (" (missed)" if v is None or v > slo["targets"][k] else "")
                for k, v in slo["percentile_values"].items()
            )
            verdict = "met" if slo["percentile_met"] else "MISSED"
            lines.append(f"p{slo['percentile']:g} targets {verdict}: {shown}")
    return "\n".join(lines)


def _kv_cache_line(cache: dict[str, Any], num_groups: int) -> str:
    """``KV cache: 447,088 tokens per replica (of 79.2 GiB: 0.9 x; weights 14.96, ...)``: what an engine logs."""
    line = f"KV cache: {cache['tokens_per_replica']:,} tokens per replica"
    if "kv_gib_per_gpu" in cache:
        line += (
            f" (per GPU, of {cache['gpu_memory_gib']:.1f} GiB x {cache['gpu_memory_frac']:g} "
            f"by the {cache['rule']} rule: "
            f"weights {cache['weights_gib_per_gpu']:.2f} GiB, activations {cache['activations_gib_per_gpu']:.2f}, "
            f"runtime {cache['runtime_gib_per_gpu']:.2f}, KV {cache['kv_gib_per_gpu']:.2f})"
        )
    return line + (f"; {num_groups - 1} more replica groups in summary.json" if num_groups > 1 else "")


def _count(number: int, noun: str) -> str:
    """``1 failure``, ``2 failures``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _transfers_line(moved: dict[str, Any]) -> str:
    """A disaggregated run's KV caches: how many moved, how big, and where they waited (p99s)."""

    def ms(block: dict[str, float | None]) -> str:
        return _fmt(block["p99"], 1000, 1)

    mean_mb = _fmt(moved["mean_kv_bytes"], 1e-6, 1)
    lost = f" ({moved['num_kv_lost']} KV caches lost with their prefill replica)" if moved.get("num_kv_lost") else ""
    return (
        f"KV transfers: {moved['num_transfers']} of {mean_mb} MB on average{lost}; p99 ms: waiting for the decode "
        f"replica {ms(moved['decode_wait_s'])}, for the link {ms(moved['link_wait_s'])}, on the link "
        f"{ms(moved['transfer_s'])}; {_fmt(moved['mean_in_flight_bytes'], 1e-9, 2)} GB held for them on average; "
        f"busy: prefill pool {_fmt(moved['prefill_pool']['mean_busy_frac'], 100, 1)}%, "
        f"decode pool {_fmt(moved['decode_pool']['mean_busy_frac'], 100, 1)}%"
    )


def _rate(rate: float | dict[str, Any]) -> str:
    """An acceptance rate as the printout shows it: the number, or its beta distribution's mean."""
    if isinstance(rate, dict):
        return f"beta mean {rate['mean']:g}, concentration {rate['concentration']:g}"
    return f"{rate:g}"
