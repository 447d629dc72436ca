"""Measure a GPU's GEMM and attention kernel times with PyTorch, for the cost model's fits.

Two steps, run where each one's dependencies are:

    python scripts/measure_kernels.py shapes > validation/kernels/gemm_shapes.json   # needs clustersim
    python scripts/measure_kernels.py measure --out DIR                                # needs torch + a GPU

``measure`` writes ``DIR/kernels.csv`` (one row per timed kernel, flushed as it goes, so a run cut
short keeps what it measured) and ``DIR/environment.json`` (GPU, driver, library versions, clocks,
and the two ceilings: a device-to-device copy and an 8192^3 matrix product).

How each kernel is timed: a ``torch.cuda._sleep`` holds the stream while the host enqueues ``n``
launches, so they run back to back as in a CUDA graph; two CUDA events bracket them; the median of
five such samples, divided by ``n``, is the time per kernel. Weights rotate among copies that
together exceed the L2 cache four times over, so every launch reads its weights from HBM, as a
forward pass through distinct layers does. Inputs are random normal (never zeros).

Kernels: ``gemm_bf16`` is ``torch.matmul`` (cuBLAS, the path vLLM's unquantised linear layers take);
``gemm_fp8`` is ``torch._scaled_mm`` with per-tensor scales (cuBLASLt FP8; vLLM's FP8 linear layers
run CUTLASS kernels of the same class). Attention is ``scaled_dot_product_attention`` with each
backend forced (``flash``: FlashAttention-2 as vendored in PyTorch; ``cudnn``: cuDNN's fused
attention; ``efficient``: the CUTLASS memory-efficient kernel). Decode attention folds each KV
head's query heads into the query length (one query row per head), as FlashAttention's decode path
does; KV is contiguous, not paged.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
SHAPE_MODELS = {
    "llama-3.2-3b": (1,),
    "llama-3.1-8b": (1,),
    "qwen2.5-7b": (1,),
    "qwen3-8b": (1,),
    "qwen2.5-14b": (1,),
    "qwen3-14b": (1,),
    "qwen3-32b": (1,),
    "llama-3.1-70b": (1, 2, 4, 8),
    "llama-3.1-405b": (4, 8),
}
# (query heads, KV heads) on one GPU: Llama-3.1-8B at TP1, Llama-3.1-70B at TP1 and TP8, and the
# FlashAttention-3 paper's benchmark layout (16 heads of 128)
HEAD_LAYOUTS = ((32, 8), (64, 8), (8, 1), (16, 16))
HEAD_DIM = 128
PREFILL_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
CHUNK_QUERIES = (256, 1024, 2048, 8192)
CHUNK_KEYS = (4096, 16384, 32768)
DECODE_BATCHES = (1, 8, 32, 128, 256)
DECODE_LENGTHS = (512, 2048, 8192, 32768)
MAX_KV_BYTES = 24e9
GPU_CYCLES_PER_S = 1.98e9  # H100/H200 SXM boost clock; only sizes the hold, not the timing
L2_MULTIPLE = 4
FIELDS = (
    "kernel",
    "backend",
    "m_tokens",
    "k",
    "n",
    "batch",
    "q_len",
    "kv_len",
    "q_heads",
    "kv_heads",
    "head_dim",
    "causal",
    "flops",
    "bytes",
    "median_s",
    "min_s",
    "max_s",
    "launches",
    "note",
)


def gemm_shapes() -> dict[str, list[str]]:
    """Every distinct per-GPU (k, n) of the listed models' attention and MLP projections."""
    from clustersim.architecture import ModelShape
    from clustersim.config.catalogue import Catalogue
    from clustersim.cost.ops import attention_gemms, mlp_gemms

    catalogue = Catalogue.builtin()
    shapes: dict[str, list[str]] = {}
    for name, degrees in SHAPE_MODELS.items():
        model = ModelShape.from_profile(catalogue.model(name))
        for tp in degrees:
            for gemm in (*attention_gemms(1, model, tp), *mlp_gemms(1, model.intermediate_size, model, tp)):
                shapes.setdefault(f"{int(gemm.k)}x{int(gemm.n)}", []).append(f"{name}/tp{tp}/{gemm.name}")
    return dict(sorted(shapes.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("x"))))


class Timer:
    """Back-to-back launches bracketed by events (see the module docstring)."""

    def __init__(self, torch, target_s: float = 0.004, samples: int = 5) -> None:
        self.torch = torch
        self.target_s = target_s
        self.samples = samples

    def _batch(self, fn, n: int, hold_s: float) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(min(hold_s, 0.1) * GPU_CYCLES_PER_S))  # room to enqueue n launches
        start.record()
        for i in range(n):
            fn(i)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / n

    def __call__(self, fn) -> tuple[float, float, float, int]:
        torch = self.torch
        fn(0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(3):
            fn(i)
        host_s = (time.perf_counter() - t0) / 3  # enqueue time per launch (or kernel time, if it blocked)
        torch.cuda.synchronize()
        first = self._batch(fn, 3, 6 * host_s)
        n = max(3, min(300, int(self.target_s / max(first, 1e-7))))
        times = [self._batch(fn, n, 2 * n * host_s + 1e-4) for _ in range(self.samples)]
        return statistics.median(times), min(times), max(times), n


class Recorder:
    def __init__(self, path: Path, fields: tuple[str, ...] = FIELDS) -> None:
        self.handle = path.open("w", newline="")
        self.fields = fields
        self.writer = csv.DictWriter(self.handle, fieldnames=fields)
        self.writer.writeheader()
        self.count = 0

    def row(self, **values) -> None:
        self.writer.writerow({k: values.get(k, "") for k in self.fields})
        self.handle.flush()
        self.count += 1


def _copies(torch, make, one_bytes: float, l2_bytes: float, limit: int = 512) -> list:
    count = max(1, min(limit, math.ceil(L2_MULTIPLE * l2_bytes / max(one_bytes, 1.0))))
    return [make() for _ in range(count)]


def _cpu_model() -> str:
    """The host processor's name (Linux), which launches every kernel of an eager step."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def _environment(torch, out: Path, timer: Timer) -> dict:
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,"
            "clocks.sm,temperature.gpu",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    env = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": props.name,
        "multiprocessors": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", 50 * 2**20),
        "memory_bytes": props.total_memory,
        "nvidia_smi": smi,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": sys.version.split()[0],
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    copy_s = timer(lambda i, s=src, d=dst: d.copy_(s))[0]
    env["copy_bytes_per_s"] = 2 * src.numel() / copy_s
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    env["matmul_8192_bf16_flops_per_s"] = 2 * 8192**3 / timer(lambda i: a @ b)[0]
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device="cuda")
    env["matmul_8192_fp8_flops_per_s"] = (
        2
        * 8192**3
        / timer(
            lambda i: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)
        )[0]
    )
    ref = a[:256].double() @ b[:, :256].double()
    env["bf16_matmul_rel_err"] = float(((a[:256] @ b[:, :256]).double() - ref).norm() / ref.norm())
    (out / "environment.json").write_text(json.dumps(env, indent=1))
    print(json.dumps(env), flush=True)
    return env


def measure_gemms(torch, rec: Recorder, timer: Timer, shapes: dict, l2: float, fp8: bool, deadline: float) -> None:
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    one = torch.tensor(1.0, device="cuda")
    elem = 1 if fp8 else 2
    for shape, users in shapes.items():
        k, n = (int(x) for x in shape.split("x"))
        if fp8:
            weights = _copies(torch, lambda k=k, n=n: torch.randn(n, k, device="cuda").to(dtype).t(), k * n, l2)
        else:
            weights = _copies(torch, lambda k=k, n=n: torch.randn(k, n, device="cuda", dtype=dtype), 2 * k * n, l2)
        for m in TOKENS:
            if time.monotonic() > deadline:
                return
            x = torch.randn(m, k, device="cuda").to(dtype)
            if fp8:

                def fn(i, x=x, w=weights):
                    return torch._scaled_mm(
                        x,
                        w[i % len(w)],
                        scale_a=one,
                        scale_b=one,
                        out_dtype=torch.bfloat16,
                        use_fast_accum=True,
                    )
            else:

                def fn(i, x=x, w=weights):
                    return x @ w[i % len(w)]

            base = {"kernel": f"gemm_{'fp8' if fp8 else 'bf16'}", "m_tokens": m, "k": k, "n": n}
            try:
                med, lo, hi, launches = timer(fn)
            except RuntimeError as exc:  # a shape the library refuses
                rec.row(**base, backend="torch", note=f"error: {str(exc).splitlines()[0][:120]}")
                continue
            num_bytes = k * n * elem + m * k * elem + m * n * 2
            rec.row(**base, backend="cublas", flops=2 * m * k * n, bytes=num_bytes, median_s=med, min_s=lo, max_s=hi,
                    launches=launches, note=";".join(users))  # fmt: skip


def _sdpa_backends(torch):
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }


def _attention(
    torch,
    rec,
    timer,
    *,
    kind,
    backend,
    batch,
    q_len,
    kv_len,
    q_heads,
    kv_heads,
    causal,
    flops,
    num_bytes,
    q_shape,
    kv_shape,
    l2,
) -> None:
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    bf16 = torch.bfloat16
    q = torch.randn(*q_shape, device="cuda", dtype=bf16)
    kv = _copies(
        torch,
        lambda: (torch.randn(*kv_shape, device="cuda", dtype=bf16), torch.randn(*kv_shape, device="cuda", dtype=bf16)),
        num_bytes,
        l2,
    )
    row = dict(kernel=kind, backend=backend, batch=batch, q_len=q_len, kv_len=kv_len, q_heads=q_heads,
               kv_heads=kv_heads, head_dim=HEAD_DIM, causal=int(causal), flops=flops, bytes=num_bytes)  # fmt: skip
    try:
        with sdpa_kernel([_sdpa_backends(torch)[backend]]):

            def fn(i):
                k, v = kv[i % len(kv)]
                return sdpa(q, k, v, is_causal=causal)

            med, lo, hi, launches = timer(fn)
    except RuntimeError as exc:
        rec.row(**row, note=f"error: {str(exc).splitlines()[0][:120]}")
        return
    rec.row(**row, median_s=med, min_s=lo, max_s=hi, launches=launches)


def measure_prefill(torch, rec, timer, l2, deadline) -> None:
    """Causal self-attention of whole prompts, and non-causal chunks over longer key ranges."""
    for qh, kvh in HEAD_LAYOUTS:
        group = qh // kvh
        cases = [(max(1, 16384 // L), L, L, True) for L in PREFILL_LENGTHS]
        cases += [(1, L, L, True) for L in PREFILL_LENGTHS if L < 16384]
        cases += [(1, c, kl, False) for c in CHUNK_QUERIES for kl in CHUNK_KEYS if kl > c]
        for batch, lq, lk, causal in cases:
            for backend in ("flash", "cudnn", "efficient"):
                if time.monotonic() > deadline:
                    return
                # KV heads repeated to the query heads (GQA done by the caller); FLOPs count QK^T and PV
                pairs = lq * lk / 2 if causal else lq * lk
                flops = 4 * batch * qh * HEAD_DIM * pairs
                num_bytes = 2 * batch * HEAD_DIM * (2 * lq * qh + 2 * lk * kvh)
                _attention(torch, rec, timer, kind="attn_prefill", backend=backend, batch=batch, q_len=lq, kv_len=lk,
                           q_heads=qh, kv_heads=kvh, causal=causal, flops=flops, num_bytes=num_bytes,
                           q_shape=(batch, qh, lq, HEAD_DIM), kv_shape=(batch, qh, lk, HEAD_DIM),
                           l2=l2 / group)  # fmt: skip


def measure_decode(torch, rec, timer, l2, deadline) -> None:
    """One new token per sequence over its KV, query heads folded into each KV head's query rows."""
    for qh, kvh in HEAD_LAYOUTS:
        group = qh // kvh
        for batch in DECODE_BATCHES:
            for lk in DECODE_LENGTHS:
                kv_bytes = 2 * 2 * batch * kvh * lk * HEAD_DIM
                if kv_bytes > MAX_KV_BYTES:
                    continue
                for backend in ("flash", "cudnn", "efficient"):
                    if time.monotonic() > deadline:
                        return
                    flops = 4 * batch * qh * HEAD_DIM * lk
                    _attention(torch, rec, timer, kind="attn_decode", backend=backend, batch=batch, q_len=1, kv_len=lk,
                               q_heads=qh, kv_heads=kvh, causal=False, flops=flops,
                               num_bytes=kv_bytes + 2 * 2 * batch * qh * HEAD_DIM,
                               q_shape=(batch, kvh, group, HEAD_DIM), kv_shape=(batch, kvh, lk, HEAD_DIM),
                               l2=l2)  # fmt: skip
                    torch.cuda.empty_cache()


def _check_attention(torch) -> dict:
    """Each backend against float64 math on fresh random inputs: relative error per backend."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = (torch.randn(2, 8, 384, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    scores = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(torch.ones(384, 384, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    ref = scores.softmax(-1) @ v.double()
    errors = {}
    for name, backend in _sdpa_backends(torch).items():
        try:
            with sdpa_kernel([backend]):
                out = sdpa(q, k, v, is_causal=True).double()
            errors[name] = float((out - ref).norm() / ref.norm())
        except RuntimeError as exc:
            errors[name] = f"error: {str(exc).splitlines()[0][:120]}"
    return errors


def measure(out: Path, shapes_path: Path, budget_s: float, sections: list[str]) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    timer = Timer(torch)
    env = _environment(torch, out, timer)
    env["attention_rel_err"] = _check_attention(torch)
    (out / "environment.json").write_text(json.dumps(env, indent=1))
    print("attention check", env["attention_rel_err"], flush=True)
    l2 = float(env["l2_bytes"])
    shapes = json.loads(shapes_path.read_text())
    rec = Recorder(out / "kernels.csv")
    start = time.monotonic()
    share = budget_s / len(sections)
    for i, section in enumerate(sections):
        deadline = start + share * (i + 1)
        t0 = time.monotonic()
        try:
            if section in ("bf16", "fp8"):
                measure_gemms(torch, rec, timer, shapes, l2, section == "fp8", deadline)
            elif section == "prefill":
                measure_prefill(torch, rec, timer, l2, deadline)
            elif section == "decode":
                measure_decode(torch, rec, timer, l2, deadline)
        except Exception:  # keep the other sections' rows
            traceback.print_exc()
            torch.cuda.empty_cache()
        print(f"{section}: {rec.count} rows so far, {time.monotonic() - t0:.1f} s", flush=True)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.sm,temperature.gpu,power.draw", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print("after:", smi, flush=True)


SUSTAINED_GEMMS = ((8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192))  # Llama-3.1-70B, one GPU
SMI_FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"


def _smi_sampler(path: Path, stop) -> None:
    with path.open("w") as handle:
        handle.write("t_s," + SMI_FIELDS + "\n")
        start = time.monotonic()
        while not stop.is_set():
            line = subprocess.run(
                ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            handle.write(f"{time.monotonic() - start:.2f},{line}\n")
            handle.flush()
            stop.wait(0.5)


def sustained(out: Path, seconds: float) -> None:
    """Throughput over time under continuous load (a prefill-like GEMM mix in BF16 and FP8, then decode
    attention), in windows of about 0.25 s, with the SM clock, power and throttle reasons beside it."""
    import threading

    import torch

    out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    sampler = threading.Thread(target=_smi_sampler, args=(out / "smi.csv", stop), daemon=True)
    one = torch.tensor(1.0, device="cuda")
    tokens = 4096
    phases = {}
    xs = torch.randn(tokens, 28672, device="cuda", dtype=torch.bfloat16)
    bf16 = [(xs[:, :k], torch.randn(k, n, device="cuda", dtype=torch.bfloat16)) for k, n in SUSTAINED_GEMMS]
    phases["gemm_bf16"] = (
        [lambda x=x, w=w: x @ w for x, w in bf16],
        sum(2 * tokens * k * n for k, n in SUSTAINED_GEMMS),
    )
    x8 = xs.to(torch.float8_e4m3fn)
    fp8 = [
        (x8[:, :k].contiguous(), torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t())
        for k, n in SUSTAINED_GEMMS
    ]
    phases["gemm_fp8"] = (
        [
            lambda x=x, w=w: torch._scaled_mm(
                x, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
            )
            for x, w in fp8
        ],
        sum(2 * tokens * k * n for k, n in SUSTAINED_GEMMS),
    )
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q = torch.randn(128, 8, 4, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    kv = [
        (
            torch.randn(128, 8, 4096, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
            torch.randn(128, 8, 4096, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
        )
        for _ in range(4)
    ]
    phases["attn_decode"] = ([lambda k=k, v=v: sdpa(q, k, v) for k, v in kv], 4 * 128 * 8 * 4096 * HEAD_DIM * 2 * 2)
    sampler.start()
    with (out / "sustained.csv").open("w") as handle:
        handle.write("phase,t_s,window_s,launches,work_per_s\n")
        start = time.monotonic()
        for name, (fns, work) in phases.items():
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                launches = 16  # rounds of every kernel of the phase
                for _ in range(launches):
                    for fn in fns:
                        fn()
                end.record()
                end.synchronize()
                window = begin.elapsed_time(end) * 1e-3
                handle.write(
                    f"{name},{time.monotonic() - start:.2f},{window:.5f},{launches},{launches * work / window:.4e}\n"
                )
                handle.flush()
            torch.cuda.synchronize()
            time.sleep(2.0)  # let the clock recover between phases
    stop.set()
    sampler.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("shapes", help="print the GEMM shapes (JSON); needs clustersim")
    run = sub.add_parser("measure", help="time the kernels on this machine's GPU; needs torch")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument(
        "--shapes", type=Path, default=Path(__file__).parent.parent / "validation/kernels/gemm_shapes.json"
    )
    run.add_argument("--budget-s", type=float, default=240.0, help="time for all sections together")
    run.add_argument("--sections", default="prefill,decode,bf16,fp8")
    held = sub.add_parser("sustained", help="throughput over time under continuous load; needs torch")
    held.add_argument("--out", type=Path, required=True)
    held.add_argument("--seconds", type=float, default=30.0, help="per phase")
    args = parser.parse_args()
    if args.command == "sustained":
        sustained(args.out, args.seconds)
    elif args.command == "shapes":
        print(json.dumps(gemm_shapes(), indent=1))
    else:
        measure(args.out, args.shapes, args.budget_s, args.sections.split(","))


if __name__ == "__main__":
    main()
