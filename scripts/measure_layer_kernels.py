"""Measure the kernels between the GEMMs and attention, MoE expert GEMMs, the per-kernel floor and
whole decode steps on a GPU, for the cost model's fits and checks.

Two steps, run where each one's dependencies are:

    python scripts/measure_layer_kernels.py shapes > validation/kernels/layer_shapes.json   # needs clustersim
    python scripts/measure_layer_kernels.py measure --out DIR                                 # needs torch + triton

``measure`` writes ``DIR/layers.csv`` (one row per timing, flushed as it goes) and
``DIR/layers.environment.json``. Kernels are timed as ``measure_kernels.py`` times them (launches
queued behind a held stream, median of five samples; inputs rotated through copies four times the
L2 cache, so each launch reads HBM). Sections:

* ``elementwise``: the fused kernels vLLM V1 runs between GEMMs, written in Triton (V1 compiles a
  model with torch.compile, whose Inductor back end emits Triton kernels for these fusions): residual
  add + RMSNorm (reads input and residual, writes both), SiLU-and-multiply of the gated MLP, and
  NeoX rotary embedding of the query and key heads in place, at each model's per-GPU widths.
* ``moe``: the routed experts' up (gate+up) and down GEMMs as one grouped GEMM each
  (``torch._grouped_mm``, CUTLASS on Hopper), BF16, tokens routed uniformly at random to ``top_k``
  distinct experts and sorted by expert, as fused-MoE kernels do.
* ``moe_fp8``: the same in FP8 (``torch._scaled_grouped_mm``, row-wise scales, each expert's rows
  padded to a multiple of 16).
* ``floor``: the time per kernel of back-to-back tiny kernels, replayed from a CUDA graph (as
  engines replay decode steps) and launched eagerly behind a held stream.
* ``layer``: whole decode and prefill steps of every layer of a model (Llama-3.1-8B on one GPU, Llama-3.1-70B's
  per-GPU shard at TP8 without its all-reduces) captured in one CUDA graph and replayed: add+RMSNorm,
  QKV GEMM, rotary, KV-cache write, attention (PyTorch's cuDNN and FlashAttention-2 kernels, each in
  turn, over a contiguous cache), output GEMM, add+RMSNorm, gate/up GEMM, SiLU-and-multiply, down
  GEMM; no embedding, LM head or sampling. Every layer has its own weights and cache, so each step reads them from HBM.
* ``eager``: the same steps launched eagerly from Python, one kernel at a time, as an engine runs a step no
  CUDA graph covers: per step, the host time to launch every kernel (``eager_host``: the clock read
  around ``step()`` with nothing waiting on the GPU), the wall time until the GPU has finished
  (``eager``) and, for the same model, the graph's replay (``cuda_graph``); ``launches`` is the
  number of kernels one step runs, counted by PyTorch's profiler. Median of seven steps after three
  warm-ups, FlashAttention-2 attention.
* ``eager_moe``: the same for the MoE blocks of Qwen3-30B-A3B (48 layers, 128 experts, top 8; eight
  distinct layers' weights in turn), routed the way a fused-MoE path routes, in plain PyTorch: router
  GEMM, softmax, top-k and renormalisation, sort by expert, expert counts and offsets, gather, the two
  grouped GEMMs with SiLU-and-multiply (Triton) between them, the weighted scatter back.
* ``launch``: the host time of one eager launch of each kind of call such a step makes (a Triton
  kernel, a cuBLAS GEMM, an FP8 cast and GEMM, PyTorch's RMSNorm, element-wise and copy kernels,
  FlashAttention-2 decode, and a tensor view that launches nothing): ``LAUNCH_CALLS`` calls back to back
  on Llama-3.1-8B's decode widths at one token, timed on the host clock; median of five.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
import traceback
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from measure_kernels import Recorder, Timer, _copies, _environment

TOKENS = (1, 8, 32, 128, 512, 1024, 2048, 4096, 8192, 16384)
MOE_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 8192)
# (model, tensor parallel) whose per-GPU widths are timed
ELEMENTWISE_MODELS = (
    ("llama-3.1-8b", 1),
    ("qwen3-14b", 1),
    ("llama-3.1-70b", 1),
    ("llama-3.1-70b", 8),
    ("qwen3-30b-a3b", 1),
    ("deepseek-v3", 8),
)
MOE_MODELS = (("mixtral-8x7b", 1), ("qwen3-30b-a3b", 1), ("gpt-oss-120b", 1), ("deepseek-v3", 8))
LAYER_MODELS = (("llama-3.1-8b", 1), ("llama-3.1-70b", 8))
LAYER_CASES = ((1, 1024), (8, 1024), (32, 1024), (64, 1024), (128, 1024), (256, 1024), (1, 8192), (32, 4096))
PREFILL_TOKENS = (512, 2048, 8192)
# (tokens, kv_len, fp8, prefill) of the eager steps: small decodes and prefills, whose kernels take less
# time than their launches, then larger ones that cover them
EAGER_CASES = ((1, 1024, False, False), (1, 1024, True, False), (8, 1024, False, False), (64, 1024, False, False),
               (16, 16, False, True), (128, 128, False, True), (512, 512, False, True),
               (2048, 2048, False, True))  # fmt: skip
FLOOR_LAUNCHES = 2000
LAUNCH_CALLS = 400
# attention inside the timed steps: cuDNN's fused kernel (on Hopper the closest of PyTorch's to the
# FlashAttention-3 engines run: ~1.9x FlashAttention-2's prefill speed) and FlashAttention-2
STEP_ATTENTION = ("cudnn", "flash")
LAYER_FIELDS = (
    "kernel",
    "backend",
    "model",
    "tensor_parallel",
    "m_tokens",
    "width",
    "q_heads",
    "kv_heads",
    "head_dim",
    "batch",
    "kv_len",
    "num_layers",
    "experts",
    "top_k",
    "experts_touched",
    "flops",
    "bytes",
    "median_s",
    "min_s",
    "max_s",
    "launches",
    "note",
)


def layer_shapes() -> dict[str, dict]:
    """Each listed model's per-GPU widths (JSON), from the catalogue."""
    from clustersim.architecture import ModelShape
    from clustersim.config.catalogue import Catalogue

    catalogue = Catalogue.builtin()
    names = {name for name, _ in (*ELEMENTWISE_MODELS, *MOE_MODELS, *LAYER_MODELS)}
    shapes = {}
    for name in sorted(names):
        m = ModelShape.from_profile(catalogue.model(name))
        shapes[name] = {
            "hidden": m.hidden_size,
            "q_heads": m.num_attention_heads,
            "kv_heads": m.num_kv_heads,
            "head_dim": m.head_dim,
            "intermediate": m.intermediate_size,
            "num_layers": m.num_layers,
            "experts": m.num_experts,
            "top_k": m.num_experts_per_token,
            "shared_experts": m.num_shared_experts,
            "moe_intermediate": m.moe_intermediate_size,
            "mla_rope_dim": m.qk_rope_head_dim if m.is_mla else 0,
        }
    return shapes


def _kernels(triton, tl):
    @triton.jit
    def add_rmsnorm(x_ptr, res_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        s = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
        s += tl.load(res_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(res_ptr + row * n_cols + offs, s.to(tl.bfloat16), mask=mask)
        scale = tl.rsqrt(tl.sum(s * s, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * n_cols + offs, (s * scale * w).to(tl.bfloat16), mask=mask)

    @triton.jit
    def silu_mul(in_ptr, out_ptr, d, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = col < d
        g = tl.load(in_ptr + row * 2 * d + col, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(in_ptr + row * 2 * d + d + col, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * d + col, (g * tl.sigmoid(g) * u).to(tl.bfloat16), mask=mask)

    @triton.jit
    def rope(q_ptr, k_ptr, cs_ptr, pos_ptr, q_row, k_row, n_q, n_k,
             NQ: tl.constexpr, NK: tl.constexpr, HALF: tl.constexpr, D: tl.constexpr):  # fmt: skip
        # the query and key halves below are one block written twice: a jit helper defined in this
        # closure is not visible to Triton's name resolution
        t = tl.program_id(0).to(tl.int64)
        pos = tl.load(pos_ptr + t)
        c = tl.arange(0, HALF)[None, :]
        cos = tl.load(cs_ptr + pos * D + c).to(tl.float32)
        sin = tl.load(cs_ptr + pos * D + HALF + c).to(tl.float32)
        hq = tl.arange(0, NQ)[:, None]
        mq = hq < n_q
        qb = q_ptr + t * q_row + hq * D + c
        q1 = tl.load(qb, mask=mq, other=0.0).to(tl.float32)
        q2 = tl.load(qb + HALF, mask=mq, other=0.0).to(tl.float32)
        tl.store(qb, (q1 * cos - q2 * sin).to(tl.bfloat16), mask=mq)
        tl.store(qb + HALF, (q2 * cos + q1 * sin).to(tl.bfloat16), mask=mq)
        hk = tl.arange(0, NK)[:, None]
        mk = hk < n_k
        kb = k_ptr + t * k_row + hk * D + c
        k1 = tl.load(kb, mask=mk, other=0.0).to(tl.float32)
        k2 = tl.load(kb + HALF, mask=mk, other=0.0).to(tl.float32)
        tl.store(kb, (k1 * cos - k2 * sin).to(tl.bfloat16), mask=mk)
        tl.store(kb + HALF, (k2 * cos + k1 * sin).to(tl.bfloat16), mask=mk)

    @triton.jit
    def tiny(ptr):
        tl.store(ptr + tl.program_id(0), 1.0)

    return add_rmsnorm, silu_mul, rope, tiny


class Ops:
    """The Triton kernels with their launch grids (one program per token, as vLLM's kernels do)."""

    def __init__(self, torch, triton, tl) -> None:
        self.torch, self.triton = torch, triton
        self._add_rmsnorm, self._silu_mul, self._rope, self.tiny = _kernels(triton, tl)

    def add_rmsnorm(self, x, res, w, out) -> None:
        n = x.shape[-1]
        block = self.triton.next_power_of_2(n)
        self._add_rmsnorm[(x.shape[0],)](x, res, w, out, n, 1e-6, BLOCK=block, num_warps=min(16, max(4, block // 512)))

    def silu_mul(self, x, out) -> None:
        d = out.shape[-1]
        self._silu_mul[(x.shape[0], self.triton.cdiv(d, 1024))](x, out, d, BLOCK=1024, num_warps=4)

    def rope(self, q, k, cos_sin, positions, n_q, n_k, head_dim) -> None:
        """``q``/``k``: (tokens, heads x head_dim) views whose rows may be strided (a fused QKV output)."""
        np2 = self.triton.next_power_of_2
        self._rope[(q.shape[0],)](q, k, cos_sin, positions, q.stride(0), k.stride(0), n_q, n_k,
                                  NQ=np2(n_q), NK=np2(n_k), HALF=head_dim // 2, D=head_dim, num_warps=4)  # fmt: skip


def _check_ops(torch, ops: Ops) -> dict:
    """Each Triton kernel against the same math in float32 on random inputs: relative error."""
    bf16, dev = torch.bfloat16, "cuda"
    x, r = _bf16(torch, 7, 4096), _bf16(torch, 7, 4096)
    w = torch.rand(4096, device=dev, dtype=bf16)
    s = x.float() + r.float()
    ref = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    out = torch.empty_like(x)
    ops.add_rmsnorm(x, r, w, out)
    errors = {"add_rmsnorm": float((out.float() - ref).norm() / ref.norm())}
    gu = torch.randn(5, 2 * 3000, device=dev, dtype=bf16)
    act = torch.empty(5, 3000, device=dev, dtype=bf16)
    ops.silu_mul(gu, act)
    g, u = gu.float().chunk(2, -1)
    ref = torch.nn.functional.silu(g) * u
    errors["silu_mul"] = float((act.float() - ref).norm() / ref.norm())
    qkv = torch.randn(6, (4 + 2 * 2) * 128, device=dev, dtype=bf16)
    cos_sin = torch.randn(64, 128, device=dev, dtype=bf16)
    pos = torch.arange(6, device=dev, dtype=torch.int64) * 3
    q0 = qkv[:, : 4 * 128].float().view(6, 4, 128)
    c, sn = cos_sin[pos, :64].float()[:, None], cos_sin[pos, 64:].float()[:, None]
    ref = torch.cat((q0[..., :64] * c - q0[..., 64:] * sn, q0[..., 64:] * c + q0[..., :64] * sn), -1)
    ops.rope(qkv[:, : 4 * 128], qkv[:, 4 * 128 : 6 * 128], cos_sin, pos, 4, 2, 128)
    errors["rope"] = float((qkv[:, : 4 * 128].float().view(6, 4, 128) - ref).norm() / ref.norm())
    return errors


def _bf16(torch, *shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def _bf16_tuple(torch, shapes):
    return tuple(_bf16(torch, *shape) for shape in shapes)


def _time_add_rmsnorm(torch, ops, rec, timer, l2, tokens: int, hidden: int, base: dict) -> None:
    num_bytes = 4 * tokens * 2 * hidden  # read input and residual, write both
    xs = _copies(torch, partial(_bf16_tuple, torch, ((tokens, hidden),) * 3), num_bytes, l2)
    weight = torch.rand(hidden, device="cuda", dtype=torch.bfloat16)

    def fn(i: int) -> None:
        x, res, out = xs[i % len(xs)]
        ops.add_rmsnorm(x, res, weight, out)

    _time(rec, timer, fn, kernel="ew_add_rmsnorm", m_tokens=tokens, width=hidden, bytes=num_bytes + 2 * hidden, **base)


def _time_silu_mul(torch, ops, rec, timer, l2, rows: int, width: int, base: dict) -> None:
    num_bytes = 6 * rows * width  # read gate and up, write their product
    acts = _copies(torch, partial(_bf16_tuple, torch, ((rows, 2 * width), (rows, width))), num_bytes, l2)

    def fn(i: int) -> None:
        ops.silu_mul(*acts[i % len(acts)])

    _time(rec, timer, fn, kernel="ew_silu_mul", m_tokens=rows, width=width, bytes=num_bytes, **base)


def _time_rope(torch, ops, rec, timer, l2, tokens: int, heads: tuple[int, int], rope_dim: int, base: dict) -> None:
    n_q, n_k = heads
    q_width, k_width = n_q * rope_dim, n_k * rope_dim
    num_bytes = 4 * tokens * (q_width + k_width)  # read and write the query and key heads in place
    qk = _copies(torch, partial(_bf16, torch, tokens, q_width + k_width), num_bytes // 2, l2)
    cos_sin = _bf16(torch, 32768, rope_dim)
    pos = torch.randint(0, 32768, (tokens,), device="cuda")

    def fn(i: int) -> None:
        t = qk[i % len(qk)]
        ops.rope(t[:, :q_width], t[:, q_width:], cos_sin, pos, n_q, n_k, rope_dim)

    _time(rec, timer, fn, kernel="ew_rope", m_tokens=tokens, width=q_width + k_width, q_heads=n_q, kv_heads=n_k,
          bytes=num_bytes + 2 * tokens * rope_dim, **base)  # fmt: skip


def measure_elementwise(torch, ops, rec, timer, shapes, l2, deadline) -> None:
    for name, tp in ELEMENTWISE_MODELS:
        s = shapes[name]
        moe = s["experts"] > 0
        width = (s["moe_intermediate"] if moe else s["intermediate"]) // tp
        copies = s["top_k"] + s["shared_experts"] if moe else 1
        rope_dim = s["mla_rope_dim"] or s["head_dim"]
        # MLA: rotary on each query head's rope part and on the one shared rope key
        heads = (max(1, s["q_heads"] // tp), 1 if s["mla_rope_dim"] else max(1, s["kv_heads"] // tp))
        base = {"backend": "triton", "model": name, "tensor_parallel": tp, "head_dim": rope_dim}
        for tokens in TOKENS:
            if time.monotonic() > deadline:
                return
            _time_add_rmsnorm(torch, ops, rec, timer, l2, tokens, s["hidden"], base)
            _time_silu_mul(torch, ops, rec, timer, l2, tokens * copies, width, base)
            _time_rope(torch, ops, rec, timer, l2, tokens, heads, rope_dim, base)
        torch.cuda.empty_cache()


def _time(rec, timer, fn, **row) -> None:
    try:
        med, lo, hi, launches = timer(fn)
    except Exception as exc:  # a shape a kernel or library refuses: say so, keep going
        rec.row(**row, note=f"error: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}")
        return
    rec.row(**row, median_s=med, min_s=lo, max_s=hi, launches=launches)


def _routing(torch, tokens: int, experts: int, top_k: int, gen):
    """Uniform random top-k distinct experts per token: the routed rows each expert gets."""
    picks = torch.rand(tokens, experts, generator=gen).argsort(dim=1)[:, :top_k]
    return torch.bincount(picks.flatten(), minlength=experts)


def _grouped(grouped, x, weights, offs, i: int):
    return grouped(x, weights[i % len(weights)], offs=offs, out_dtype=x.dtype)


def measure_moe(torch, rec, timer, shapes, l2, deadline) -> None:
    bf16 = torch.bfloat16
    grouped = getattr(torch, "_grouped_mm", None) or torch.nn.functional.grouped_mm
    gen = torch.Generator().manual_seed(20240601)
    for name, tp in MOE_MODELS:
        s = shapes[name]
        experts, top_k, hidden = s["experts"], s["top_k"], s["hidden"]
        width = s["moe_intermediate"] // tp
        for label, k, n in (("moe_up", hidden, 2 * width), ("moe_down", width, hidden)):
            one = experts * k * n * 2
            weights = _copies(torch, partial(_bf16, torch, experts, k, n), one, l2, limit=8)
            for tokens in MOE_TOKENS:
                if time.monotonic() > deadline:
                    return
                counts = _routing(torch, tokens, experts, top_k, gen)  # routed rows sorted by expert
                offs, touched = counts.cumsum(0).to(torch.int32).cuda(), int((counts > 0).sum())
                rows = tokens * top_k
                x = torch.randn(rows, k, device="cuda", dtype=bf16)
                _time(rec, timer, partial(_grouped, grouped, x, weights, offs),
                      kernel=label, backend="torch._grouped_mm", model=name, tensor_parallel=tp, m_tokens=tokens,
                      width=n, experts=experts, top_k=top_k, experts_touched=touched, flops=2 * rows * k * n,
                      bytes=2 * (touched * k * n + rows * (k + n)), note=f"k={k}")  # fmt: skip
            del weights
            torch.cuda.empty_cache()


def _scaled_grouped(x, scale_x, weights, scales_w, offs, i: int):
    import torch

    return torch._scaled_grouped_mm(x, weights[i % len(weights)], scale_x, scales_w, offs=offs,
                                    out_dtype=torch.bfloat16, use_fast_accum=True)  # fmt: skip


def measure_moe_fp8(torch, rec, timer, shapes, l2, deadline) -> None:
    """The routed experts in FP8 (``torch._scaled_grouped_mm``, row-wise scales), each expert's rows
    padded to a multiple of 16 as the FP8 grouped kernel needs (fused-MoE kernels pad to their block)."""
    fp8 = torch.float8_e4m3fn
    gen = torch.Generator().manual_seed(20240601)
    for name, tp in MOE_MODELS:
        s = shapes[name]
        experts, top_k, hidden = s["experts"], s["top_k"], s["hidden"]
        width = s["moe_intermediate"] // tp
        for label, k, n in (("moe_up_fp8", hidden, 2 * width), ("moe_down_fp8", width, hidden)):
            weights = _copies(torch, partial(_fp8_experts, torch, experts, k, n), experts * k * n, l2, limit=8)
            scales_w = torch.ones(experts, n, device="cuda", dtype=torch.float32)
            for tokens in MOE_TOKENS:
                if time.monotonic() > deadline:
                    return
                counts = _routing(torch, tokens, experts, top_k, gen)
                padded = (counts + 15) // 16 * 16
                rows = int(padded.sum())
                offs = padded.cumsum(0).to(torch.int32).cuda()
                touched = int((counts > 0).sum())
                x = torch.randn(rows, k, device="cuda").to(fp8)
                scale_x = torch.ones(rows, device="cuda", dtype=torch.float32)
                _time(rec, timer, partial(_scaled_grouped, x, scale_x, weights, scales_w, offs),
                      kernel=label, backend="torch._scaled_grouped_mm", model=name, tensor_parallel=tp,
                      m_tokens=tokens, width=n, experts=experts, top_k=top_k, experts_touched=touched,
                      flops=2 * rows * k * n, bytes=touched * k * n + rows * (k + 2 * n),
                      note=f"k={k};rows padded to 16 per expert: {rows}")  # fmt: skip
            del weights
            torch.cuda.empty_cache()


def _fp8_experts(torch, experts: int, k: int, n: int):
    """(experts, k, n) FP8 weights laid out column-major per expert, as the FP8 grouped GEMM takes them."""
    return torch.randn(experts, n, k, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)


def measure_floor(torch, ops, rec, timer) -> None:
    """Per-kernel time of FLOOR_LAUNCHES tiny kernels: from a CUDA graph, and eagerly behind a hold."""
    buf = torch.zeros(1024, device="cuda")
    a = torch.randn(1, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    cases = {
        "floor_triton_store": lambda i: ops.tiny[(1,)](buf),
        "floor_torch_add": lambda i: buf[:1].add_(1.0),
        "floor_gemm_1x128x128": lambda i: a @ b,
    }
    for kernel, fn in cases.items():
        _time(rec, timer, fn, kernel=kernel, backend="eager")
        try:
            fn(0)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
                for i in range(FLOOR_LAUNCHES):
                    fn(i)
            torch.cuda.synchronize()
            med, lo, hi = _replay(torch, graph)
            rec.row(kernel=kernel, backend="cuda_graph", median_s=med / FLOOR_LAUNCHES, min_s=lo / FLOOR_LAUNCHES,
                    max_s=hi / FLOOR_LAUNCHES, launches=FLOOR_LAUNCHES)  # fmt: skip
        except Exception as exc:
            rec.row(kernel=kernel, backend="cuda_graph", note=f"error: {str(exc).splitlines()[0][:160]}")


def _replay(torch, graph, samples: int = 7) -> tuple[float, float, float]:
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times), min(times), max(times)


class StepModel:
    """Every layer's weights and KV cache of one model's per-GPU shard, and one step through them.

    ``fp8``: weights in FP8 (E4M3, per-tensor scales) and each GEMM's input cast to FP8 first (one
    kernel, as an unfused static-scale FP8 linear layer does), GEMMs by ``torch._scaled_mm``.
    ``prefill``: one sequence of ``tokens`` new tokens attends causally to itself (no earlier
    context); else ``tokens`` sequences each add one token over ``kv_len`` cached ones.
    """

    def __init__(self, torch, ops, shape: dict, tp: int, tokens: int, kv_len: int, fp8: bool, prefill: bool) -> None:
        bf16, dev = torch.bfloat16, "cuda"
        self.torch, self.ops, self.fp8, self.prefill = torch, ops, fp8, prefill
        h, d = shape["hidden"], shape["head_dim"]
        self.n_q, self.n_k, self.d = shape["q_heads"] // tp, max(1, shape["kv_heads"] // tp), d
        width = shape["intermediate"] // tp
        qkv = (self.n_q + 2 * self.n_k) * d
        self.one = torch.tensor(1.0, device=dev)

        def w(k, n):
            weight = torch.empty(n, k, device=dev, dtype=bf16).normal_(0, 1 / math.sqrt(k))
            return weight.to(torch.float8_e4m3fn).t() if fp8 else weight.t().contiguous()

        seqs = 1 if prefill else tokens
        self.layers = [
            {
                "norm1": torch.rand(h, device=dev, dtype=bf16),
                "qkv": w(h, qkv),
                "o": w(self.n_q * d, h),
                "norm2": torch.rand(h, device=dev, dtype=bf16),
                "gate_up": w(h, 2 * width),
                "down": w(width, h),
                "cache": torch.empty(seqs, 2, self.n_k, kv_len, d, device=dev, dtype=bf16).normal_(),
            }
            for _ in range(shape["num_layers"])
        ]
        self.x = torch.randn(tokens, h, device=dev, dtype=bf16)
        self.res = torch.randn(tokens, h, device=dev, dtype=bf16)
        self.normed = torch.empty_like(self.x)
        self.act = torch.empty(tokens, width, device=dev, dtype=bf16)
        self.cos_sin = torch.randn(kv_len, d, device=dev, dtype=bf16)
        if prefill:
            self.positions = torch.arange(tokens, device=dev, dtype=torch.int64)
        else:
            self.positions = torch.full((tokens,), kv_len - 1, device=dev, dtype=torch.int64)
        self.tokens, self.kv_len = tokens, kv_len
        self.native_gqa = True

    def gemm(self, x, weight):
        torch = self.torch
        if not self.fp8:
            return x @ weight
        xq = x.to(torch.float8_e4m3fn)
        return torch._scaled_mm(xq, weight, scale_a=self.one, scale_b=self.one, out_dtype=torch.bfloat16,
                                use_fast_accum=True)  # fmt: skip

    def attention(self, qkv, cache):
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        t, n_q, n_k, d = self.tokens, self.n_q, self.n_k, self.d
        if self.prefill:  # the prompt's keys and values fill the cache; causal attention over them
            cache[0, :, :, :t, :].copy_(qkv[:, n_q * d :].view(t, 2, n_k, d).permute(1, 2, 0, 3))
            q = qkv[:, : n_q * d].view(t, n_q, d).transpose(0, 1).unsqueeze(0)
            k, v = cache[:, 0, :, :t], cache[:, 1, :, :t]
            if n_q != n_k and not self.native_gqa:
                k, v = k.repeat_interleave(n_q // n_k, dim=1), v.repeat_interleave(n_q // n_k, dim=1)
            try:
                out = sdpa(q, k, v, is_causal=True, enable_gqa=n_q != n_k)
            except RuntimeError:  # this build's FlashAttention lacks grouped heads: repeat them (noted in the row)
                if not self.native_gqa:
                    raise
                self.native_gqa = False
                return self.attention(qkv, cache)
            return out.squeeze(0).transpose(0, 1).reshape(t, n_q * d)
        cache[:, :, :, self.kv_len - 1, :].copy_(qkv[:, n_q * d :].view(t, 2, n_k, d))
        q = qkv[:, : n_q * d].view(t, n_k, n_q // n_k, d)
        return sdpa(q, cache[:, 0], cache[:, 1]).reshape(t, n_q * d)

    def step(self) -> None:
        ops, n_q, n_k, d = self.ops, self.n_q, self.n_k, self.d
        x = self.x
        for layer in self.layers:
            ops.add_rmsnorm(x, self.res, layer["norm1"], self.normed)
            qkv = self.gemm(self.normed, layer["qkv"])
            ops.rope(qkv[:, : n_q * d], qkv[:, n_q * d :], self.cos_sin, self.positions, n_q, n_k, d)
            out = self.gemm(self.attention(qkv, layer["cache"]), layer["o"])
            ops.add_rmsnorm(out, self.res, layer["norm2"], self.normed)
            ops.silu_mul(self.gemm(self.normed, layer["gate_up"]), self.act)
            x = self.gemm(self.act, layer["down"])


def _graph_time(torch, model, backend: str) -> tuple[float, float, float]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    with sdpa_kernel([chosen]):
        model.step()  # compile and warm up outside the capture
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            model.step()
    return _replay(torch, graph)


def measure_layers(torch, ops, rec, shapes, deadline) -> None:
    cases = [(b, kv, False, False) for b, kv in LAYER_CASES]
    cases += [(b, kv, True, False) for b, kv in LAYER_CASES if kv == 1024]
    cases += [(t, t, fp8, True) for t in PREFILL_TOKENS for fp8 in (False, True)]
    for name, tp in LAYER_MODELS:
        shape = shapes[name]
        for (tokens, kv_len, fp8, prefill), backend in itertools.product(cases, STEP_ATTENTION):
            if time.monotonic() > deadline:
                return
            row = dict(kernel="prefill_step" if prefill else "decode_step", backend=f"cuda_graph/{backend}",
                       note="fp8" if fp8 else "bf16", model=name, tensor_parallel=tp, batch=1 if prefill else tokens,
                       kv_len=kv_len, num_layers=shape["num_layers"], m_tokens=tokens, head_dim=shape["head_dim"],
                       q_heads=shape["q_heads"] // tp, kv_heads=max(1, shape["kv_heads"] // tp))  # fmt: skip
            model = None
            try:
                model = StepModel(torch, ops, shape, tp, tokens, kv_len, fp8, prefill)
                med, lo, hi = _graph_time(torch, model, backend)
                if not model.native_gqa:
                    row["note"] += "; kv heads repeated"
                rec.row(**row, median_s=med, min_s=lo, max_s=hi, launches=1)
            except Exception as exc:
                row["note"] += f"; error: {str(exc).splitlines()[0][:160]}"
                rec.row(**row)
                traceback.print_exc()
            del model
            torch.cuda.empty_cache()


def _count_kernels(torch, model) -> int | None:
    """The CUDA kernels one step of ``model`` launches (PyTorch's profiler; None where it fails)."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model.step()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:
        traceback.print_exc()
        return None


def _eager_times(torch, model, samples: int = 7) -> tuple[list[float], list[float]]:
    """Host launch time and wall time of ``samples`` eager steps, each started on an idle GPU."""
    for _ in range(3):
        model.step()
    host, wall = [], []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append(t1 - t0)
        wall.append(t2 - t0)
    return host, wall


def measure_eager(torch, ops, rec, shapes, deadline) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for (name, tp), (tokens, kv_len, fp8, prefill) in itertools.product(LAYER_MODELS, EAGER_CASES):
        if time.monotonic() > deadline:
            return
        shape = shapes[name]
        kind = "prefill_step" if prefill else "decode_step"
        row = dict(note="fp8" if fp8 else "bf16", model=name, tensor_parallel=tp, batch=1 if prefill else tokens,
                   kv_len=kv_len, num_layers=shape["num_layers"], m_tokens=tokens, head_dim=shape["head_dim"],
                   q_heads=shape["q_heads"] // tp, kv_heads=max(1, shape["kv_heads"] // tp))  # fmt: skip
        model = None
        try:
            model = StepModel(torch, ops, shape, tp, tokens, kv_len, fp8, prefill)
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                host, wall = _eager_times(torch, model)
                launches = _count_kernels(torch, model)
            graph = _graph_time(torch, model, "flash")
            for backend, times in (("eager_host/flash", host), ("eager/flash", wall)):
                rec.row(kernel=kind, backend=backend, **row, median_s=statistics.median(times), min_s=min(times),
                        max_s=max(times), launches=launches)  # fmt: skip
            rec.row(kernel=kind, backend="cuda_graph/flash", **row, median_s=graph[0], min_s=graph[1],
                    max_s=graph[2], launches=launches)  # fmt: skip
        except Exception as exc:
            row["note"] += f"; error: {str(exc).splitlines()[0][:160]}"
            rec.row(kernel=kind, backend="eager/flash", **row)
            traceback.print_exc()
        del model
        torch.cuda.empty_cache()


def _host_per_call(torch, fn, calls: int = LAUNCH_CALLS, samples: int = 5) -> list[float]:
    """Host seconds per call of ``fn`` launched ``calls`` times back to back on an idle GPU."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return times


class MoEStep:
    """Every MoE block of one model (attention left out) for ``tokens`` tokens, launched eagerly."""

    def __init__(self, torch, ops, shape: dict, tokens: int, distinct: int = 8) -> None:
        bf16, dev = torch.bfloat16, "cuda"
        self.torch, self.ops, self.layers = torch, ops, shape["num_layers"]
        self.experts, self.top_k, h, w = shape["experts"], shape["top_k"], shape["hidden"], shape["moe_intermediate"]
        self.grouped = getattr(torch, "_grouped_mm", None) or torch.nn.functional.grouped_mm
        self.weights = [
            (
                torch.randn(h, self.experts, device=dev, dtype=bf16),
                torch.randn(self.experts, h, 2 * w, device=dev, dtype=bf16) / math.sqrt(h),
                torch.randn(self.experts, w, h, device=dev, dtype=bf16) / math.sqrt(w),
            )
            for _ in range(distinct)
        ]
        self.x = torch.randn(tokens, h, device=dev, dtype=bf16)
        self.act = torch.empty(tokens * self.top_k, w, device=dev, dtype=bf16)

    def step(self) -> None:
        torch, x = self.torch, self.x
        for i in range(self.layers):
            router, up, down = self.weights[i % len(self.weights)]
            probs = torch.softmax((x @ router).float(), dim=-1)
            top_p, top_i = probs.topk(self.top_k, dim=-1)
            top_p = top_p / top_p.sum(dim=-1, keepdim=True)
            order = top_i.flatten().argsort()
            offs = torch.bincount(top_i.flatten(), minlength=self.experts).cumsum(0).to(torch.int32)
            rows = order // self.top_k
            gate_up = self.grouped(x[rows], up, offs=offs, out_dtype=x.dtype)
            self.ops.silu_mul(gate_up, self.act)
            y = self.grouped(self.act, down, offs=offs, out_dtype=x.dtype)
            out = torch.zeros_like(x)
            out.index_add_(0, rows, y * top_p.flatten()[order].unsqueeze(1).to(x.dtype))
            x = out


def measure_moe_eager(torch, ops, rec, shapes, deadline) -> None:
    shape = shapes["qwen3-30b-a3b"]
    for tokens in (1, 8, 64, 512):
        if time.monotonic() > deadline:
            return
        row = dict(model="qwen3-30b-a3b", tensor_parallel=1, m_tokens=tokens, num_layers=shape["num_layers"],
                   experts=shape["experts"], top_k=shape["top_k"], note="moe blocks only")  # fmt: skip
        try:
            model = MoEStep(torch, ops, shape, tokens)
            host, wall = _eager_times(torch, model)
            launches = _count_kernels(torch, model)
            for backend, times in (("eager_host", host), ("eager", wall)):
                rec.row(kernel="moe_step", backend=backend, **row, median_s=statistics.median(times),
                        min_s=min(times), max_s=max(times), launches=launches)  # fmt: skip
            del model
        except Exception as exc:
            rec.row(kernel="moe_step", backend="eager", **row, note=f"error: {str(exc).splitlines()[0][:160]}")
            traceback.print_exc()
        torch.cuda.empty_cache()


def measure_launch(torch, ops, rec, shapes) -> None:
    from torch.nn.functional import rms_norm
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    shape = shapes["llama-3.1-8b"]
    h, d, n_q, n_k = shape["hidden"], shape["head_dim"], shape["q_heads"], shape["kv_heads"]
    bf16, dev = torch.bfloat16, "cuda"
    x, res, out = (torch.randn(1, h, device=dev, dtype=bf16) for _ in range(3))
    w_norm = torch.rand(h, device=dev, dtype=bf16)
    qkv = torch.randn(1, (n_q + 2 * n_k) * d, device=dev, dtype=bf16)
    w_qkv = torch.randn(h, (n_q + 2 * n_k) * d, device=dev, dtype=bf16)
    w8 = torch.randn((n_q + 2 * n_k) * d, h, device=dev, dtype=bf16).to(torch.float8_e4m3fn).t()
    x8, one = x.to(torch.float8_e4m3fn), torch.tensor(1.0, device=dev)
    gate_up, act = torch.randn(1, 2 * 4096, device=dev, dtype=bf16), torch.empty(1, 4096, device=dev, dtype=bf16)
    cos_sin, pos = torch.randn(1024, d, device=dev, dtype=bf16), torch.full((1,), 1023, device=dev)
    cache = torch.randn(1, 2, n_k, 1024, d, device=dev, dtype=bf16)
    q = torch.randn(1, n_k, n_q // n_k, d, device=dev, dtype=bf16)
    buf = torch.zeros(1024, device=dev)
    calls = {
        "triton_add_rmsnorm": lambda: ops.add_rmsnorm(x, res, w_norm, out),
        "triton_silu_mul": lambda: ops.silu_mul(gate_up, act),
        "triton_rope": lambda: ops.rope(qkv[:, : n_q * d], qkv[:, n_q * d :], cos_sin, pos, n_q, n_k, d),
        "triton_store": lambda: ops.tiny[(1,)](buf),
        "gemm_bf16": lambda: x @ w_qkv,
        "cast_fp8": lambda: x.to(torch.float8_e4m3fn),
        "gemm_fp8": lambda: torch._scaled_mm(x8, w8, scale_a=one, scale_b=one, out_dtype=bf16, use_fast_accum=True),
        "torch_rms_norm": lambda: rms_norm(x, (h,), w_norm, 1e-6),
        "torch_add": lambda: buf.add_(1.0),
        "cache_copy": lambda: cache[:, :, :, 1023, :].copy_(qkv[:, n_q * d :].view(1, 2, n_k, d)),
        "sdpa_flash_decode": lambda: sdpa(q, cache[:, 0], cache[:, 1]),
        "view_only": lambda: qkv[:, : n_q * d].view(1, n_k, n_q // n_k, d).transpose(1, 2),
    }
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        for kernel, fn in calls.items():
            try:
                times = _host_per_call(torch, fn)
                rec.row(kernel=kernel, backend="eager_host", model="llama-3.1-8b", m_tokens=1,
                        median_s=statistics.median(times), min_s=min(times), max_s=max(times),
                        launches=LAUNCH_CALLS)  # fmt: skip
            except Exception as exc:
                rec.row(kernel=kernel, backend="eager_host", note=f"error: {str(exc).splitlines()[0][:160]}")
                traceback.print_exc()


def measure(out: Path, shapes_path: Path, budget_s: float, sections: list[str]) -> None:
    import torch
    import triton
    import triton.language as tl

    out.mkdir(parents=True, exist_ok=True)
    timer = Timer(torch)
    env = _environment(torch, out, timer)
    ops = Ops(torch, triton, tl)
    env["triton"] = triton.__version__
    env["triton_rel_err"] = _check_ops(torch, ops)
    (out / "environment.json").rename(out / "layers.environment.json")
    (out / "layers.environment.json").write_text(json.dumps(env, indent=1))
    print("triton check", env["triton_rel_err"], flush=True)
    l2 = float(env["l2_bytes"])
    shapes = json.loads(shapes_path.read_text())
    rec = Recorder(out / "layers.csv", LAYER_FIELDS)
    start = time.monotonic()
    share = budget_s / len(sections)
    for i, section in enumerate(sections):
        deadline = start + share * (i + 1)
        t0 = time.monotonic()
        try:
            if section == "elementwise":
                measure_elementwise(torch, ops, rec, timer, shapes, l2, deadline)
            elif section == "moe":
                measure_moe(torch, rec, timer, shapes, l2, deadline)
            elif section == "moe_fp8":
                measure_moe_fp8(torch, rec, timer, shapes, l2, deadline)
            elif section == "floor":
                measure_floor(torch, ops, rec, timer)
            elif section == "layer":
                measure_layers(torch, ops, rec, shapes, deadline)
            elif section == "eager":
                measure_eager(torch, ops, rec, shapes, deadline)
            elif section == "eager_moe":
                measure_moe_eager(torch, ops, rec, shapes, deadline)
            elif section == "launch":
                measure_launch(torch, ops, rec, shapes)
        except Exception:  # keep the other sections' rows
            traceback.print_exc()
        torch.cuda.empty_cache()
        print(f"{section}: {rec.count} rows so far, {time.monotonic() - t0:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("shapes", help="print the models' per-GPU widths (JSON); needs clustersim")
    run = sub.add_parser("measure", help="time the kernels on this machine's GPU; needs torch and triton")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument(
        "--shapes", type=Path, default=Path(__file__).parent.parent / "validation/kernels/layer_shapes.json"
    )
    run.add_argument("--budget-s", type=float, default=240.0, help="time for all sections together")
    run.add_argument(
        "--sections", default="floor,elementwise,moe,moe_fp8,layer", help="of those, eager, eager_moe and launch"
    )
    args = parser.parse_args()
    if args.command == "shapes":
        print(json.dumps(layer_shapes(), indent=1))
    else:
        measure(args.out, args.shapes, args.budget_s, args.sections.split(","))


if __name__ == "__main__":
    main()
