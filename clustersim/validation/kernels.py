"""Measured kernel times (microsoft/vidur profiles) as samples the cost model prices.

Each :class:`KernelSample` is one measured time of one op group on one GPU, with the work the
cost model assigns it (from :mod:`clustersim.cost.ops`) and a key that decides its half of the
train/held-out split (every repeat of one shape lands in the same half).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import pandas as pd

from clustersim.architecture import BYTES_PER_ELEMENT, GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import EngineProfile
from clustersim.config.scenario import Precision
from clustersim.cost.base import StepBatch
from clustersim.cost.ops import (
    Gemm,
    Work,
    attention_gemms,
    decode_attention_work,
    elementwise_work,
    mlp_gemms,
    prefill_attention_work,
)
from clustersim.cost.roofline import (
    all_reduce_time_s,
    decode_attention_layer_time,
    gemm_time,
    grouped_time,
    kernel_time_s,
    prefill_attention_layer_time,
)
from clustersim.errors import ConfigError

Group = Literal[
    "linear",
    "linear_fp8",
    "elementwise",
    "attention_decode",
    "attention_prefill",
    "all_reduce",
    "elementwise_fused",
    "moe",
    "step",
]
GROUPS: tuple[Group, ...] = get_args(Group)
# groups no fit uses: every sample is scored (scripts/measure_layer_kernels.py's tables)
SCORED_ONLY: frozenset[str] = frozenset({"elementwise_fused", "moe", "step"})
MAX_TOKENS = 4096
MEASURED_PREFIX = "validation/kernels/"
MEASURED_HEAD_DIM = 128  # scripts/measure_kernels.py times head dim 128 only
SPLIT_SEED = 20240601
MS = 1e-3

# which catalogue GPU each vidur file prefix was measured on
_GPU_OF_PREFIX = {"vidur_h100": "H100-SXM", "vidur_a100": "A100-80GB"}
# which catalogue GPU each device name in a measured file's environment.json is (scripts/measure_kernels.py)
_GPU_OF_DEVICE = {"NVIDIA H100 80GB HBM3": "H100-SXM", "NVIDIA H200": "H200", "NVIDIA A100-SXM4-80GB": "A100-80GB"}
_LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")


def kernel_engine(catalogue: Catalogue) -> EngineProfile:
    """The engine profile kernel timings are priced with: the GPU's kernels as measured, so without the
    engine's corpus-fitted efficiency scales and with NCCL's all-reduce (what the timings ran), not the
    engine's own all-reduce kernels."""
    return catalogue.engine("vllm").model_copy(update={"efficiency": None, "all_reduce_latency_s": None})


@dataclass(frozen=True, slots=True)
class KernelSample:
    """One measured time and everything needed to price it.

    ``gemms`` (linear), ``work`` (other compute groups) or ``message_bytes`` (all-reduce) hold the
    work; ``num_seqs`` matters for decode attention; ``tensor_parallel`` for all-reduce.
    """

    gpu: str
    group: Group
    key: tuple[float, ...]
    measured_s: float
    num_tokens: int
    tensor_parallel: int
    model: ModelShape | None = None
    gemms: tuple[Gemm, ...] = ()
    work: Work | None = None
    num_seqs: int = 0
    message_bytes: float = 0.0
    gemm_times_s: tuple[float, ...] = ()
    source: str = ""
    batch: StepBatch | None = None

    def predict_s(self, gpu: GpuSpec) -> float:
        """The cost model's time for this sample on ``gpu`` (the same functions a step is priced with).
        Single kernels were timed in short bursts, below the GPU's power limit; whole steps under it."""
        if self.group != "step":
            gpu = gpu.in_bursts()
        if self.group in ("linear", "linear_fp8"):
            assert self.model is not None
            return sum(gemm_time(g, self.model, gpu).time_s for g in self.gemms)
        if self.group == "all_reduce":
            return all_reduce_time_s(self.message_bytes, self.tensor_parallel, gpu)
        if self.group == "step":
            assert self.model is not None and self.batch is not None
            return kernel_time_s(self.batch, self.model, gpu, self.tensor_parallel)
        assert self.work is not None
        if self.group == "moe":
            assert self.model is not None
            return grouped_time(self.work, self.model, gpu).time_s
        if self.group in ("elementwise", "elementwise_fused"):
            memory_s = self.work.bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac)
            return self.work.num_kernels * gpu.elementwise_kernel_latency_s + memory_s
        if self.group == "attention_decode":
            return decode_attention_layer_time(self.work, self.num_seqs, gpu).time_s
        return prefill_attention_layer_time(self.work, gpu).time_s


def _gpu_of(path: Path) -> str:
    for prefix, gpu in _GPU_OF_PREFIX.items():
        if path.name.startswith(prefix):
            return gpu
    raise ConfigError(str(path), "", "not a vidur profile (expected a name starting with vidur_h100 or vidur_a100)")


def _shape_from_columns(row: pd.Series, name: str) -> ModelShape:
    heads = int(row["n_head"])
    hidden = int(row["n_embd"])
    return ModelShape(
        name=name,
        num_layers=1,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=int(row["n_kv_head"]),
        head_dim=hidden // heads,
        intermediate_size=int(row.get("n_expanded_embd", 4 * hidden)),
        vocab_size=int(row.get("vocab_size", 32000)),
        gated_mlp=bool(row.get("use_gated_mlp", True)),
        tied_embeddings=False,
        max_model_len_tokens=int(row.get("max_model_len", 4096)),
        weight_bytes_per_param=2.0,
        kv_bytes_per_element=2.0,
    )


def _median_s(row: pd.Series, op: str) -> float:
    return float(row[f"time_stats.{op}.median"]) * MS


def mlp_samples(path: Path) -> list[KernelSample]:
    """Per-layer linear (4 GEMMs) and element-wise samples from a ``*_mlp.csv`` file, <= 4096 tokens."""
    gpu = _gpu_of(path)
    frame = pd.read_csv(path)
    frame = frame[frame["num_tokens"] <= MAX_TOKENS]
    samples: list[KernelSample] = []
    shapes: dict[tuple[int, ...], ModelShape] = {}
    for _, row in frame.iterrows():
        shape_key = (int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"]), int(row["n_expanded_embd"]))
        model = shapes.setdefault(shape_key, _shape_from_columns(row, path.stem))
        tokens = int(row["num_tokens"])
        tp = int(row["num_tensor_parallel_workers"])
        key = (float(tokens),)
        gemms = (*attention_gemms(tokens, model, tp), *mlp_gemms(tokens, model.intermediate_size, model, tp))
        gemm_times = tuple(_median_s(row, op) for op in _LINEAR_OPS)
        samples.append(
            KernelSample(gpu, "linear", key, sum(gemm_times), tokens, tp, model, gemms, gemm_times_s=gemm_times)
        )
        element_s = sum(_median_s(row, op) for op in _ELEMENTWISE_OPS)
        work = elementwise_work(tokens, model, tp, moe_layer=False)
        # vidur times the residual add as its own kernel: five kernels, not the four a fused engine runs
        work = Work(work.flops, work.bytes, len(_ELEMENTWISE_OPS))
        samples.append(KernelSample(gpu, "elementwise", key, element_s, tokens, tp, model, work=work))
    return samples


def attention_samples(path: Path) -> list[KernelSample]:
    """Decode and prefill attention samples from an ``*_attention_*.csv`` file (one layer, one GPU)."""
    gpu = _gpu_of(path)
    frame = pd.read_csv(path)
    first = frame.iloc[0]
    heads = int(first["n_q_head"])
    tp = int(first["num_tensor_parallel_workers"])
    model = ModelShape(
        name=path.stem,
        num_layers=1,
        hidden_size=int(first["n_embd"]),
        num_attention_heads=heads,
        num_kv_heads=int(first["n_kv_head"]),
        head_dim=int(first["n_embd"]) // heads,
        intermediate_size=4 * int(first["n_embd"]),
        vocab_size=32000,
        gated_mlp=True,
        tied_embeddings=False,
        max_model_len_tokens=int(first["max_model_len"]),
        weight_bytes_per_param=2.0,
        kv_bytes_per_element=2.0,
    )
    samples: list[KernelSample] = []
    for _, row in frame.iterrows():
        kv = int(row["kv_cache_size"])
        if bool(row["is_prefill"]):
            chunk = int(row["prefill_chunk_size"])
            work = prefill_attention_work((chunk,), (kv,), model, tp)
            measured = _median_s(row, "attn_prefill")
            samples.append(
                KernelSample(gpu, "attention_prefill", (chunk, kv), measured, chunk, tp, model, work=work, num_seqs=1)
            )
        else:
            batch = int(row["batch_size"])
            work = decode_attention_work(batch, batch * kv, model, tp)
            measured = _median_s(row, "attn_decode")
            samples.append(
                KernelSample(
                    gpu, "attention_decode", (batch, kv), measured, batch, tp, model, work=work, num_seqs=batch
                )
            )
    return samples


def all_reduce_samples(path: Path) -> list[KernelSample]:
    """Single-node all-reduce samples (``devices_per_node == num_workers``) from ``*_all_reduce.csv``."""
    gpu = _gpu_of(path)
    frame = pd.read_csv(path)
    frame = frame[frame["devices_per_node"] == frame["num_workers"]]
    samples: list[KernelSample] = []
    for _, row in frame.iterrows():
        size = float(row["size"])
        workers = int(row["num_workers"])
        measured = float(row["time_stats.all_reduce.median"]) * MS
        samples.append(KernelSample(gpu, "all_reduce", (size,), measured, 0, workers, message_bytes=size))
    return samples


def measured_gpu(path: Path) -> str:
    env_path = path.with_name(f"{path.stem}.environment.json")
    if not env_path.is_file():
        raise ConfigError(str(path), "", f"no {env_path.name} beside it (written by scripts/measure_kernels.py)")
    device = str(json.loads(env_path.read_text(encoding="utf-8")).get("device", ""))
    if device not in _GPU_OF_DEVICE:
        raise ConfigError(str(env_path), "device", f"{device!r} is not a GPU clustersim maps to a hardware profile")
    return _GPU_OF_DEVICE[device]


def _measured_shape(q_heads: int, kv_heads: int, precision: Precision = "bf16") -> ModelShape:
    return ModelShape(
        name="measured",
        num_layers=1,
        hidden_size=q_heads * MEASURED_HEAD_DIM,
        num_attention_heads=q_heads,
        num_kv_heads=kv_heads,
        head_dim=MEASURED_HEAD_DIM,
        intermediate_size=1,
        vocab_size=1,
        gated_mlp=True,
        tied_embeddings=False,
        max_model_len_tokens=1 << 20,
        weight_bytes_per_param=BYTES_PER_ELEMENT[precision],
        kv_bytes_per_element=2.0,
        weight_precision=precision,
    )


def _measured_gemm(gpu: str, row: pd.Series, source: str) -> KernelSample:
    fp8 = row["kernel"] == "gemm_fp8"
    m, k, n = int(row["m_tokens"]), int(row["k"]), int(row["n"])
    model = _measured_shape(8, 8, "fp8" if fp8 else "bf16")
    measured = float(row["median_s"])
    gemm = Gemm("gemm", m, k, n)
    group: Group = "linear_fp8" if fp8 else "linear"
    return KernelSample(gpu, group, (m, k, n), measured, m, 1, model, (gemm,), gemm_times_s=(measured,), source=source)


def _measured_attention(gpu: str, row: pd.Series, source: str) -> KernelSample:
    model = _measured_shape(int(row["q_heads"]), int(row["kv_heads"]))
    batch, q_len, kv_len = int(row["batch"]), int(row["q_len"]), int(row["kv_len"])
    key = (batch, q_len, kv_len, float(row["q_heads"]), float(row["kv_heads"]), float(row["causal"]))
    measured = float(row["median_s"])
    if row["kernel"] == "attn_decode":
        work = decode_attention_work(batch, batch * kv_len, model, 1)
        return KernelSample(gpu, "attention_decode", key, measured, batch, 1, model, work=work, num_seqs=batch,
                            source=source)  # fmt: skip
    if bool(row["causal"]):
        work = prefill_attention_work((q_len,) * batch, (0,) * batch, model, 1)
    else:
        # q_len queries over every one of kv_len keys: as many query-key pairs as a causal chunk of
        # q_len tokens after kv_len - q_len / 2 prior ones, and (within q_len / 2) the same key span
        work = prefill_attention_work((q_len,), (kv_len - q_len // 2,), model, 1)
    return KernelSample(gpu, "attention_prefill", key, measured, batch * q_len, 1, model, work=work,
                        num_seqs=batch, source=source)  # fmt: skip


_NUMERIC = {
    "gemm": ("m_tokens", "k", "n", "median_s"),
    "attn": ("batch", "q_len", "kv_len", "q_heads", "kv_heads", "causal", "median_s"),
}


def _check_numeric(frame: pd.DataFrame, path: Path) -> None:
    """Every field a row's kernel needs is a number (a failed timing may leave ``median_s`` empty)."""
    for prefix, columns in _NUMERIC.items():
        rows = frame[frame["kernel"].astype(str).str.startswith(prefix)]
        for column in columns:
            values = pd.to_numeric(rows[column], errors="coerce")
            bad = values.isna() & rows[column].notna() if column == "median_s" else values.isna()
            if bad.any():
                line = int(rows.index[bad.to_numpy()][0]) + 2  # the header is line 1
                problem = f"line {line}: {rows[column][bad].iloc[0]!r} is not a number"
                raise ConfigError(str(path), column, problem)
            frame.loc[rows.index, column] = values


def measured_samples(path: Path) -> list[KernelSample]:
    """Samples from a ``scripts/measure_kernels.py`` table (its ``environment.json`` beside it names the GPU).

    GEMMs are one sample each (BF16 fitted as ``linear``, FP8 scored as ``linear_fp8``). Attention
    shapes were timed with several PyTorch backends; each shape's fastest stands for the engine's
    kernel (FlashAttention-3, which engines run on Hopper, is in none of them; see docs/validation.md).
    """
    gpu = measured_gpu(path)
    frame = pd.read_csv(path)
    missing = {"kernel"}.union(*_NUMERIC.values()) - set(frame.columns)
    if missing:
        raise ConfigError(str(path), ", ".join(sorted(missing)), "missing columns of a measured kernel table")
    _check_numeric(frame, path)
    frame = frame[frame["median_s"].notna() & (frame["median_s"] > 0)]
    source = f"{MEASURED_PREFIX}{path.name}"
    samples = [_measured_gemm(gpu, row, source) for _, row in frame[frame["kernel"].str.startswith("gemm")].iterrows()]
    attention = frame[frame["kernel"].str.startswith("attn")]
    shape = ["kernel", "batch", "q_len", "kv_len", "q_heads", "kv_heads", "causal"]
    fastest = attention.loc[attention.groupby(shape)["median_s"].idxmin()]
    samples.extend(_measured_attention(gpu, row, source) for _, row in fastest.iterrows())
    return samples


def load_samples(profiles_dir: Path, kernels_dir: Path | None = None) -> list[KernelSample]:
    """Every sample of every vidur file in ``profiles_dir`` and every measured table in ``kernels_dir``."""
    if not profiles_dir.is_dir():
        raise ConfigError(str(profiles_dir), "", "no such folder of measured profiles")
    samples: list[KernelSample] = []
    for path in sorted(profiles_dir.glob("vidur_*.csv")):
        if path.name.endswith("_mlp.csv"):
            found = mlp_samples(path)
        elif "_attention_" in path.name:
            found = attention_samples(path)
        elif path.name.endswith("_all_reduce.csv"):
            found = all_reduce_samples(path)
        else:
            continue
        source = f"shared/ground_truth/profiles/{path.name}"
        samples.extend(replace(s, source=source) for s in found)
    if kernels_dir is not None:
        if not kernels_dir.is_dir():
            raise ConfigError(str(kernels_dir), "", "no such folder of measured kernel tables")
        tables = sorted(kernels_dir.glob("*.csv"))
        tables = [p for p in tables if p.with_name(f"{p.stem}.environment.json").is_file()]
        if not tables:
            raise ConfigError(
                str(kernels_dir), "", "holds no measured kernel table (NAME.csv with NAME.environment.json)"
            )
        for path in tables:
            samples.extend(measured_samples(path))
        layers = kernels_dir / "layers"
        if layers.is_dir():
            from clustersim.validation.layerkernels import layer_samples

            for path in sorted(layers.glob("*.csv")):
                samples.extend(layer_samples(path))
    if not samples:
        raise ConfigError(
            str(profiles_dir), "", "holds no vidur_*_mlp.csv, *_attention_*.csv or *_all_reduce.csv files"
        )
    return samples


def files_by_gpu_and_group(samples: Iterable[KernelSample]) -> dict[tuple[str, str], str]:
    """Which files feed each (GPU, op group), as their paths from the samples' ``source``, joined by "and"."""
    out: dict[tuple[str, str], dict[str, None]] = {}
    for sample in samples:
        out.setdefault((sample.gpu, sample.group), {})[sample.source] = None
    return {key: " and ".join(names) for key, names in out.items()}


def held_out(samples: Iterable[KernelSample], seed: int = SPLIT_SEED) -> dict[tuple[str, str, tuple[float, ...]], bool]:
    """Which (gpu, group, key) shapes are held out: a seeded random half of each group's distinct keys
    (every key of a group in :data:`SCORED_ONLY`, which no fit uses; such groups draw nothing from the
    seeded stream, so they leave the other groups' halves as they were)."""
    keys: dict[tuple[str, str], dict[tuple[float, ...], None]] = {}
    out: dict[tuple[str, str, tuple[float, ...]], bool] = {}
    for sample in samples:
        if sample.group in SCORED_ONLY:
            out[(sample.gpu, sample.group, sample.key)] = True
        else:
            keys.setdefault((sample.gpu, sample.group), {})[sample.key] = None
    rng = np.random.default_rng(seed)
    for (gpu, group), unique in sorted(keys.items()):
        group_keys = list(unique)
        order = rng.permutation(len(group_keys))
        for rank, index in enumerate(order):
            out[(gpu, group, group_keys[index])] = rank % 2 == 1
    return out
