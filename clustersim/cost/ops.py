"""FLOPs and bytes of every op of one step on one GPU: pure arithmetic, no timing.

Shapes follow one GPU of a tensor-parallel group (GEMMs split by columns or rows, heads split,
KV heads replicated when there are fewer than GPUs; MLA's low-rank down projections and the MoE
router are replicated). All counts are for ONE layer unless the name says otherwise; the
roofline (:mod:`clustersim.cost.roofline`) multiplies by layers and turns work into seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.architecture import ModelShape


@dataclass(frozen=True, slots=True)
class Gemm:
    """One matrix multiply ``[tokens x k] @ [k x n]`` (``n_bias`` bias values added to the output)."""

    name: str
    tokens: float
    k: float
    n: float
    bias: bool = False

    def flops(self) -> float:
        return 2.0 * self.tokens * self.k * self.n

    def weight_elements(self) -> float:
        return self.k * self.n + (self.n if self.bias else 0.0)

    def bytes(self, weight_bytes: float, activation_bytes: float) -> float:
        """Weights read once, activations read and written once."""
        return self.weight_elements() * weight_bytes + self.tokens * (self.k + self.n) * activation_bytes


def attention_gemms(num_tokens: int, model: ModelShape, tensor_parallel: int) -> tuple[Gemm, ...]:
    """The attention projections of one layer for ``num_tokens`` tokens on one GPU."""
    tp, d, t = tensor_parallel, model.hidden_size, num_tokens
    if model.is_mla:
        heads = model.num_attention_heads / tp
        return (
            Gemm("q_down", t, d, model.q_lora_rank),
            Gemm("q_up", t, model.q_lora_rank, heads * (model.qk_nope_head_dim + model.qk_rope_head_dim)),
            Gemm("kv_down", t, d, model.kv_lora_rank + model.qk_rope_head_dim),
            Gemm("kv_up", t, model.kv_lora_rank, heads * (model.qk_nope_head_dim + model.v_head_dim)),
            Gemm("o", t, heads * model.v_head_dim, d),
        )
    kv_width = 2 * model.kv_heads_per_gpu(tp) * model.head_dim
    return (
        Gemm("qkv", t, d, model.q_dim / tp + kv_width, bias=model.qkv_bias),
        Gemm("o", t, model.q_dim / tp, d),
    )


def mlp_gemms(num_tokens: float, intermediate_size: float, model: ModelShape, tensor_parallel: int) -> tuple[Gemm, ...]:
    """Up (fused with gate when gated) and down projections of one MLP, column/row-sharded."""
    width = intermediate_size / tensor_parallel
    up = (2 if model.gated_mlp else 1) * width
    return (Gemm("up", num_tokens, model.hidden_size, up), Gemm("down", num_tokens, width, model.hidden_size))


def expected_experts_touched(num_tokens: int, num_experts: int, top_k: int) -> float:
    """Expected distinct experts a batch of ``num_tokens`` tokens routes to, ``E x (1 - (1 - k/E)^T)``.

    Assumes each token picks its ``top_k`` experts uniformly and independently of other tokens.
    """
    if num_experts == 0 or num_tokens == 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


@dataclass(frozen=True, slots=True)
class Work:
    """FLOPs and bytes of a group of kernels.

    ``flops_per_key``: for prefill attention, each chunk's FLOPs divided by the keys it spans
    (prior context + its own tokens), summed: what a key-length-dependent efficiency needs.
    ``query_tiles``: for prefill attention, the kernel's blocks of query rows over every head and chunk
    (its parallel work items): what an occupancy-dependent efficiency needs.
    """

    flops: float
    bytes: float
    num_kernels: int
    flops_per_key: float = 0.0
    query_tiles: float = 0.0


def moe_experts_work(
    num_tokens: int, model: ModelShape, tensor_parallel: int, routing_tokens: int | None = None
) -> Work:
    """Routed experts of one MoE layer: only the experts some token picks are read (fused MoE kernel).

    FLOPs: every token runs ``top_k`` expert MLPs. Weights: the expected number of distinct experts
    touched by ``routing_tokens`` independently routed tokens (default: all of them; a CUDA graph's
    padding rows are copies of one dummy token, which all pick the same experts: count them once);
    activations: each routed token copy is read and written at each of the two GEMMs.
    """
    if num_tokens == 0 or not model.is_moe:
        return Work(0.0, 0.0, 0)
    routed = num_tokens * model.num_experts_per_token
    up, down = mlp_gemms(routed, model.moe_intermediate_size, model, tensor_parallel)
    independent = num_tokens if routing_tokens is None else min(routing_tokens, num_tokens)
    touched = expected_experts_touched(independent, model.num_experts, model.num_experts_per_token)
    weight_bytes = touched * (up.weight_elements() + down.weight_elements()) * model.weight_bytes_per_param
    activation_bytes = routed * (up.k + up.n + down.k + down.n) * model.activation_bytes_per_element
    return Work(up.flops() + down.flops(), weight_bytes + activation_bytes, 2)


def moe_dense_gemms(num_tokens: int, model: ModelShape, tensor_parallel: int) -> tuple[Gemm, ...]:
    """The router (replicated on every GPU) and the always-on shared experts of one MoE layer."""
    if not model.is_moe:
        return ()
    router = Gemm("router", num_tokens, model.hidden_size, model.num_experts)
    if model.num_shared_experts == 0:
        return (router,)
    shared = mlp_gemms(num_tokens, model.num_shared_experts * model.moe_intermediate_size, model, tensor_parallel)
    return (router, *shared)


def elementwise_work(num_tokens: int, model: ModelShape, tensor_parallel: int, moe_layer: bool) -> Work:
    """Norms, residual adds, rotary embedding and the MLP activation of one layer (memory-bound).

    Per token: two fused add+RMSNorm kernels each read the input and residual and write both (4 x
    hidden each); rotary embedding reads and writes the query and key shards; the gated activation
    reads gate and up and writes their product (routed copies for an MoE layer).
    """
    tp = tensor_parallel
    norms = 2 * 4 * model.hidden_size
    if model.is_mla:
        rope_width = (model.num_attention_heads / tp + 1) * model.qk_rope_head_dim
    else:
        rope_width = model.q_dim / tp + model.kv_heads_per_gpu(tp) * model.head_dim
    if moe_layer:
        width = model.moe_intermediate_size / tp
        copies = model.num_experts_per_token + model.num_shared_experts
    else:
        width = model.intermediate_size / tp
        copies = 1
    activation = copies * ((2 if model.gated_mlp else 1) * width + width)
    per_token = norms + 2 * rope_width + activation
    flops = num_tokens * (norms + activation)  # a few FLOPs per element; never the bound
    return Work(flops, num_tokens * per_token * model.activation_bytes_per_element, 4)


def embedding_work(num_tokens: int, model: ModelShape) -> Work:
    """Gather one embedding row per token and write it (vocab-parallel: rows live on one GPU each)."""
    row = model.hidden_size * (model.embedding_bytes_per_param + model.activation_bytes_per_element)
    return Work(0.0, num_tokens * row, 1)


def lm_head_gemm(num_seqs: int, model: ModelShape, tensor_parallel: int) -> Gemm:
    """Logits for the last position of each sequence that samples, vocab-sharded over TP."""
    return Gemm("lm_head", num_seqs, model.hidden_size, model.vocab_size / tensor_parallel)


def lm_head_logits_bytes(num_seqs: int, model: ModelShape, tensor_parallel: int) -> float:
    """Logits are written in float32 for sampling (on top of the GEMM's own 16-bit output)."""
    return num_seqs * model.vocab_size / tensor_parallel * 4.0


def decode_attention_work(num_seqs: int, context_tokens: float, model: ModelShape, tensor_parallel: int) -> Work:
    """One layer of decode attention over ``context_tokens`` cached tokens summed over sequences.

    Standard: QK^T and PV are 2 x 2 x head_dim FLOPs per query head and cached token; the KV of every
    cached token is read once per KV head on this GPU. MLA (weights absorbed, as vLLM/SGLang decode
    it): scores over the ``kv_lora + rope`` latent and values over the ``kv_lora`` latent, per head;
    the shared latent is read once. Plus each sequence's query and output vectors.
    """
    heads = model.num_attention_heads / tensor_parallel
    act = model.activation_bytes_per_element
    if model.is_mla:
        latent = model.kv_lora_rank + model.qk_rope_head_dim
        flops = 2.0 * heads * context_tokens * (latent + model.kv_lora_rank)
        kv_bytes = context_tokens * latent * model.kv_bytes_per_element
        qo_bytes = num_seqs * heads * (latent + model.kv_lora_rank) * act
        return Work(flops, kv_bytes + qo_bytes, 1)
    # a window layer reads its window only (the check first: this runs for every step)
    keys = model.decode_attended_tokens(num_seqs, context_tokens) if model.num_sliding_window_layers else context_tokens
    flops = 4.0 * heads * model.head_dim * keys
    kv_bytes = keys * 2 * model.kv_heads_per_gpu(tensor_parallel) * model.head_dim * model.kv_bytes_per_element
    qo_bytes = 2.0 * num_seqs * heads * model.head_dim * act
    return Work(flops, kv_bytes + qo_bytes, 1)


# FlashAttention-2's and -3's forward kernels give each thread block 128 query rows of one head at head dim 128
# (FA2 csrc/flash_attn/src/flash_fwd_launch_template.h, run_mha_fwd_hdim128: Flash_fwd_kernel_traits<128, 128,
# ...>; FA3 hopper/tile_size.h: kBlockM 128 for hdim 128): a chunk of n tokens is ceil(n / 128) blocks per head
PREFILL_QUERY_TILE_TOKENS = 128


def prefill_attention_work(
    new_tokens: tuple[int, ...], context_tokens: tuple[int, ...], model: ModelShape, tensor_parallel: int
) -> Work:
    """One layer of causal prefill attention over all chunks (one variable-length kernel).

    Each of a chunk's ``n`` new tokens attends to the ``p`` prior tokens and, causally, to the new
    ones before it: ``n x (p + (n + 1) / 2)`` query-key pairs, 2 matmuls x 2 FLOPs x head dim each
    (MLA prefill decompresses K and V: ``qk_nope + qk_rope`` for scores, ``v_head_dim`` for values).
    Bytes: the prior KV read, the new KV written, queries read and outputs written.
    ``flops_per_key`` weights each chunk by the keys it spans (``p + n``), the length its
    kernel efficiency depends on (:func:`clustersim.cost.roofline.prefill_attention_layer_time`).
    A sliding-window layer of window ``w`` gives each query at most the last ``w`` keys and reads at most
    ``w`` prior ones; a query tile there spans at most ``w`` plus its own 128 keys, which is its length;
    the work is the mean over the model's layers (:func:`_layer_mean`).
    """
    heads = model.num_attention_heads / tensor_parallel
    act = model.activation_bytes_per_element
    if model.is_mla:
        pair_flops = 2.0 * heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim)
        kv_per_token = model.kv_cache_elements_per_token_per_layer * model.kv_bytes_per_element
        qo_per_token = heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim) * act
    else:
        pair_flops = 4.0 * heads * model.head_dim
        kv_per_token = 2 * model.kv_heads_per_gpu(tensor_parallel) * model.head_dim * model.kv_bytes_per_element
        qo_per_token = 2.0 * heads * model.head_dim * act
    window = model.sliding_window_tokens if model.num_sliding_window_layers else 0
    flops = 0.0
    num_bytes = 0.0
    per_key = 0.0
    tiles = 0.0
    for n, p in zip(new_tokens, context_tokens, strict=True):
        chunk = pair_flops * n * (p + (n + 1) / 2.0)
        chunk_bytes = (p + n) * kv_per_token + n * qo_per_token
        chunk_per_key = chunk / (p + n)
        if window:
            windowed = pair_flops * (_keys_in_window(p + n, window) - _keys_in_window(p, window))
            span = min(p + n, window + PREFILL_QUERY_TILE_TOKENS)
            chunk = _layer_mean(model, chunk, windowed)
            chunk_per_key = _layer_mean(model, chunk_per_key, windowed / span)
            chunk_bytes = _layer_mean(model, chunk_bytes, (min(p, window) + n) * kv_per_token + n * qo_per_token)
        flops += chunk
        per_key += chunk_per_key
        num_bytes += chunk_bytes
        tiles += heads * -(-n // PREFILL_QUERY_TILE_TOKENS)
    return Work(flops, num_bytes, 1, per_key, tiles)


def _keys_in_window(num_queries: int, window: int) -> float:
    """Query-key pairs of the first ``num_queries`` positions when each attends to itself and the keys
    before it, at most ``window`` in all: ``sum of min(q, window)`` over ``q = 1 .. num_queries``."""
    if num_queries <= window:
        return num_queries * (num_queries + 1) / 2.0
    return window * (window + 1) / 2.0 + (num_queries - window) * window


def _layer_mean(model: ModelShape, full: float, windowed: float) -> float:
    """A per-layer quantity averaged over the model's full-attention and sliding-window layers."""
    sliding = model.num_sliding_window_layers
    return ((model.num_layers - sliding) * full + sliding * windowed) / model.num_layers
