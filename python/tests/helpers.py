"""Shared test machinery: the fp64 NumPy reference, dtype rounding, the tolerance table and a
builder that fills a paged cache for a ragged batch through a layer's own write_kv."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import ml_dtypes
import numpy as np

import attn

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
FP8_DTYPES = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


def tolerance(io_dtype: str, kv_storage: str) -> tuple[float, float]:
    """(atol, rtol) against the fp64 reference: mirrors tests/support's central table. The
    reference sees exactly the values the cache holds, so this bounds only kernel error."""
    if io_dtype == "float32":
        return (2e-5, 2e-5) if kv_storage == "float32" else (5e-3, 5e-3)
    return {"float16": (2e-3, 2e-3), "bfloat16": (1.2e-2, 1.2e-2)}[io_dtype]


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x as the kernel sees it after conversion to `dtype`, back in float64."""
    return x.astype(NUMPY_DTYPES[dtype]).astype(np.float64)


def stored(x: np.ndarray, storage: str, scale: np.ndarray) -> np.ndarray:
    """What a cache of `storage` dtype holds for x, dequantized (per-KV-head scales on axis 1)."""
    if storage in FP8_DTYPES:
        s = scale.reshape(1, -1, 1).astype(np.float32)
        inv = (np.float32(1) / s).astype(np.float32)  # the cache multiplies by 1/scale in fp32
        q8 = (x.astype(np.float32) * inv).astype(FP8_DTYPES[storage])
        return q8.astype(np.float64) * s.astype(np.float64)
    return rounded(x, storage)


def reference_attention(q, k, v, *, query_lens, seq_lens, scale, causal=True, window=0, soft_cap=0.0,
                        sinks=None) -> np.ndarray:
    """fp64 attention over concatenated sequences (DESIGN.md §4). q: [T, H, D]; k, v: per-sequence
    lists of [seq_len, Hkv, D(v)]. Query i of a sequence sits at position seq_len - query_len + i."""
    num_heads, group = q.shape[1], q.shape[1] // k[0].shape[1]
    out = np.zeros((q.shape[0], num_heads, v[0].shape[2]))
    start = 0
    for s, (qlen, slen) in enumerate(zip(query_lens, seq_lens)):
        for h in range(num_heads):
            ks, vs = k[s][:, h // group, :], v[s][:, h // group, :]
            qs = q[start:start + qlen, h, :]
            logits = (qs @ ks.T) * scale
            if soft_cap:
                logits = soft_cap * np.tanh(logits / soft_cap)
            qpos = np.arange(slen - qlen, slen)[:, None]
            kpos = np.arange(slen)[None, :]
            visible = np.ones((qlen, slen), dtype=bool)
            if causal:
                visible &= kpos <= qpos
            if window:
                visible &= kpos > qpos - window
            logits = np.where(visible, logits, -np.inf)
            m = logits.max(axis=1, keepdims=True) if slen else np.full((qlen, 1), -np.inf)
            if sinks is not None:
                m = np.maximum(m, sinks[h])
            m = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(logits - m)
            denom = p.sum(axis=1, keepdims=True)
            if sinks is not None:
                denom = denom + np.exp(sinks[h] - m)
            out[start:start + qlen, h, :] = np.divide(p @ vs, denom, out=np.zeros((qlen, vs.shape[1])), where=denom > 0)
        start += qlen
    return out


@dataclass
class Batch:
    """A ragged batch written into a paged cache: what forward() needs plus the reference inputs."""

    layer: attn.Attention
    cache: attn.KVCache
    md: attn.BatchMetadata
    q: np.ndarray  # in the layer dtype
    k_ref: list = field(default_factory=list)  # per sequence [seq_len, Hkv, D], as stored (fp64)
    v_ref: list = field(default_factory=list)
    q_ref: np.ndarray | None = None
    query_lens: list = field(default_factory=list)
    seq_lens: list = field(default_factory=list)

    def reference(self, **kw) -> np.ndarray:
        return reference_attention(self.q_ref, self.k_ref, self.v_ref, query_lens=self.query_lens,
                                   seq_lens=self.seq_lens, scale=self.layer.scale, **kw)


TOKEN_HEAD_DTYPES = ("int8_per_token_head", "fp8_per_token_head")


def token_head_quantized(x: np.ndarray, storage: str):
    """vLLM's per-token-head quantization of x [..., head_size] (one scale per vector: absmax over
    the last axis / the top code, floored at 1e-6; code = x * (1 / scale), int8 rounded half away
    from zero): (dequantized float64 values, codes, float32 scales [..., 1])."""
    x32 = np.asarray(x, dtype=np.float32)
    top = np.float32(127.0 if storage == "int8" else 448.0)
    scale = np.maximum(np.abs(x32).max(axis=-1, keepdims=True) / top, np.float32(1e-6)).astype(np.float32)
    q = x32 * (np.float32(1) / scale)
    if storage == "int8":
        codes = np.clip(np.where(q >= 0, q + np.float32(0.5), q - np.float32(0.5)), -128, 127).astype(np.int8)
    else:
        codes = q.astype(ml_dtypes.float8_e4m3fn)
    return codes.astype(np.float64) * scale.astype(np.float64), codes, scale


NVFP4_DTYPES = ("nvfp4", "nvfp4_4over6")
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)


def e2m1_codes(y: np.ndarray) -> np.ndarray:
    """Nearest e2m1 codes (cvt.rn.satfinite.e2m1: ties to the even code, saturating at 6, sign in bit 3)."""
    a = np.abs(y)
    m = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0], [0, 1, 2, 3, 4, 5, 6], 7)
    return (m | np.where(np.signbit(y), 8, 0)).astype(np.uint8)


def nvfp4_quantized(x: np.ndarray, g: float = 1.0, four_over_six: bool = False):
    """vLLM's NVFP4 store (csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu) of x [..., n], n a multiple
    of 16, under global scale g: block scale e4m3(max|x| / 6 / g) per 16 values (4over6: or max / 4,
    whichever reconstructs the block better), codes e2m1(x / (scale * g)). Returns (dequantized float64
    values, attn's row bytes uint8 [..., n / 2 + n / 16]: the codes, two per byte, then the scales)."""
    x32 = np.asarray(x, np.float32)
    n = x32.shape[-1]
    blocks = x32.reshape(*x32.shape[:-1], n // 16, 16)
    vmax = np.abs(blocks).max(axis=-1, keepdims=True)
    inv_g = np.float32(1) / np.float32(g)
    one = np.float32(1)

    def candidate(den):
        sf = (inv_g * (vmax * (one / np.float32(den)))).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
        sfv = sf.astype(np.float32)
        with np.errstate(divide="ignore"):
            out = np.where(sfv != 0, one / (sfv * (one / inv_g)), np.float32(0)).astype(np.float32)
        return sf, out

    def values(codes):
        mag = E2M1[codes & 7]
        return np.where(codes & 8, -mag, mag).astype(np.float32)

    sf, out = candidate(6)
    if four_over_six:
        def error(sf_c, out_c):
            with np.errstate(divide="ignore"):
                back = np.where(out_c != 0, one / out_c, np.float32(0)).astype(np.float32)
            d = np.where(out_c != 0, values(e2m1_codes(blocks * out_c)) * back - blocks, blocks)
            return (d * d).sum(axis=-1, keepdims=True)
        sf4, out4 = candidate(4)
        use4 = error(sf4, out4) < error(sf, out)
        sf, out = np.where(use4, sf4, sf), np.where(use4, out4, out)
    codes = e2m1_codes(blocks * out)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8).reshape(*x32.shape[:-1], n // 2)
    scale_bytes = sf.view(np.uint8)[..., 0]
    deq = (values(codes) * sf.astype(np.float32)).astype(np.float64) * np.float64(g)
    return deq.reshape(x32.shape), np.concatenate([packed, scale_bytes], axis=-1)


def rht_signs(n: int) -> np.ndarray:
    """vLLM's RHT signs (vllm/v1/attention/ops/int4_per_token_head.py _get_rht_signs), drawn with torch."""
    import torch
    gen = torch.Generator(device="cpu")
    gen.manual_seed(0x9E3779B9)
    return (2.0 * torch.bernoulli(torch.full((n,), 0.5), generator=gen) - 1.0).numpy().astype(np.float32)


def walsh_hadamard(x: np.ndarray) -> np.ndarray:
    """The unnormalized transform along the last axis, vLLM's CPU butterfly order, in x's dtype."""
    x = np.array(x)
    n, h = x.shape[-1], 1
    while h < n:
        v = x.reshape(*x.shape[:-1], n // (2 * h), 2, h)
        a, b = v[..., 0, :].copy(), v[..., 1, :].copy()
        v[..., 0, :], v[..., 1, :] = a + b, a - b
        x = v.reshape(x.shape)
        h *= 2
    return x


def int4_quantized(x: np.ndarray, dtype: str):
    """vLLM's int4_per_token_head write of x [..., n] given in `dtype`: rotate in fp32 (signs, then
    the transform), round to `dtype`, scale = max((max - min) / 15, 1e-6), zero point round(-min /
    scale), codes round(y * (1 / scale) + zp) (fused), half away from zero, clamped to [0, 15],
    packed low nibble first; the zero point in the scale's low 4 bits. Returns (the values the
    cache holds, rotated back in float64; packed codes; stored float32 scales [..., 1])."""
    n = x.shape[-1]
    signs = rht_signs(n)
    y = rounded(walsh_hadamard(np.asarray(x, np.float32) * signs), dtype).astype(np.float32)
    lo, hi = y.min(axis=-1, keepdims=True), y.max(axis=-1, keepdims=True)
    scale = np.maximum((hi - lo) / np.float32(15), np.float32(1e-6)).astype(np.float32)
    half_away = lambda v: np.trunc(np.where(v >= 0, v + np.float32(0.5), v - np.float32(0.5)))
    zp = np.clip(half_away((-lo / scale).astype(np.float32)), 0, 15).astype(np.float32)
    inv = (np.float32(1) / scale).astype(np.float32)
    fused = (y.astype(np.float64) * inv.astype(np.float64) + zp).astype(np.float32)  # one rounding, as an fma
    codes = np.clip(half_away(fused), 0, 15).astype(np.uint8)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    bits = (scale.view(np.uint32) & np.uint32(0xFFFFFFF0)) | zp.astype(np.uint32)
    stored = bits.view(np.float32)
    held = (codes.astype(np.float64) - zp) * (bits & np.uint32(0xFFFFFFF0)).view(np.float32).astype(np.float64)
    return walsh_hadamard(held) * signs / n, packed, stored


def int4_query(q: np.ndarray, dtype: str) -> np.ndarray:
    """The query an int4 cache's attention sees (vLLM's single_rht(q.float()).to(q.dtype)): rotated in
    fp32, rounded to `dtype`, rotated back in float64."""
    n = q.shape[-1]
    signs = rht_signs(n)
    y = rounded(walsh_hadamard(np.asarray(q, np.float32) * signs), dtype)
    return walsh_hadamard(y) * signs / n


def make_batch(rng: np.random.Generator, layer: attn.Attention, context_lens, query_lens, *, block_size=None,
               kv_scale=None, spare_blocks=3, poison=True) -> Batch:
    """Random q/k/v for sequences with `context_lens` cached tokens and `query_lens` new ones.
    Blocks are drawn as a random permutation (so tables are scattered), unused slots hold NaN, and
    every token's K/V goes in through layer.write_kv: the context in one earlier step, then the new
    tokens in the step whose metadata forward() gets."""
    cfg = layer.config
    block_size = block_size or layer.block_size
    seq_lens = [c + q for c, q in zip(context_lens, query_lens)]
    need = [max(1, math.ceil(n / block_size)) for n in seq_lens]
    num_blocks = sum(need) + spare_blocks
    cache = layer.make_cache(num_blocks, block_size)
    if poison:
        cache.fill(float("nan"))
    if kv_scale is not None:
        cache.set_scales(kv_scale, kv_scale)
    scales = np.asarray(cache.k_scales)
    perm = rng.permutation(num_blocks)
    block_ids, at = [], 0
    for n in need:
        block_ids.append([int(b) for b in perm[at:at + n]])
        at += n

    dt = NUMPY_DTYPES[cfg.dtype]
    hv = cfg.effective_head_size_v
    k_all = [rng.standard_normal((n, cfg.num_kv_heads, cfg.head_size)) for n in seq_lens]
    v_all = [rng.standard_normal((n, cfg.num_kv_heads, hv)) for n in seq_lens]
    storage = cache.dtype

    def write(lo, hi, md):
        k = np.concatenate([k_all[s][lo[s]:hi[s]] for s in range(len(seq_lens))]).astype(dt)
        v = np.concatenate([v_all[s][lo[s]:hi[s]] for s in range(len(seq_lens))]).astype(dt)
        layer.write_kv(k, v, cache, md)

    zeros = [0] * len(seq_lens)
    if any(context_lens):
        md_ctx = attn.BatchMetadata(context_lens=zeros, query_lens=list(context_lens), block_ids=block_ids, cache=cache)
        write(zeros, list(context_lens), md_ctx)
    md = attn.BatchMetadata(context_lens=list(context_lens), query_lens=list(query_lens), block_ids=block_ids,
                            cache=cache, causal=cfg.causal)
    write(list(context_lens), seq_lens, md)

    num_tokens = sum(query_lens)
    q = rng.standard_normal((num_tokens, cfg.num_heads, cfg.head_size)).astype(dt)
    batch = Batch(layer, cache, md, q, query_lens=list(query_lens), seq_lens=seq_lens)
    batch.q_ref = q.astype(np.float64)
    # The cache converts from the I/O dtype, so the reference rounds twice like the data did.
    if cache.kv_cache_dtype == "int4_per_token_head":
        batch.q_ref = int4_query(q.astype(np.float32), cfg.dtype)
        batch.k_ref = [int4_quantized(rounded(k, cfg.dtype), cfg.dtype)[0] for k in k_all]
        batch.v_ref = [int4_quantized(rounded(v, cfg.dtype), cfg.dtype)[0] for v in v_all]
        return batch
    if cache.kv_cache_dtype in NVFP4_DTYPES:  # per KV head: its global scale
        four = cache.kv_cache_dtype == "nvfp4_4over6"
        def nv(x, g):
            return np.stack([nvfp4_quantized(rounded(x[:, h], cfg.dtype), g[h], four)[0] for h in range(x.shape[1])], axis=1)
        batch.k_ref = [nv(k, np.asarray(cache.k_scales)) for k in k_all]
        batch.v_ref = [nv(v, np.asarray(cache.v_scales)) for v in v_all]
        return batch
    if cache.kv_cache_dtype in TOKEN_HEAD_DTYPES:
        batch.k_ref = [token_head_quantized(rounded(k, cfg.dtype), storage)[0] for k in k_all]
        batch.v_ref = [token_head_quantized(rounded(v, cfg.dtype), storage)[0] for v in v_all]
        return batch
    batch.k_ref = [stored(rounded(k, cfg.dtype), storage, scales) for k in k_all]
    batch.v_ref = [stored(rounded(v, cfg.dtype), storage, scales) for v in v_all]
    return batch


def filled_step(layer, rng, context, query):
    """A cache of the layer holding context + query tokens per sequence (random K/V written through
    write_kv), and the step's metadata. The block ids depend only on the lengths and block size, so
    layers of one config get equal block tables: one plan fits them all."""
    cfg = layer.config
    seq = [c + q for c, q in zip(context, query)]
    per = [-(-s // layer.block_size) for s in seq]
    order = np.random.default_rng(0).permutation(sum(per) + 2)  # scattered, the same for every layer
    cache = layer.make_cache(len(order))
    at = np.cumsum([0] + per)
    block_ids = [[int(x) for x in order[at[i]:at[i + 1]]] for i in range(len(seq))]
    fill = attn.BatchMetadata(context_lens=[0] * len(seq), query_lens=seq, block_ids=block_ids, cache=cache)
    dt = np.float32 if cfg.dtype == "float32" else ml_dtypes.bfloat16
    k = rng.standard_normal((sum(seq), cfg.num_kv_heads, cfg.head_size)).astype(dt)
    v = None if cfg.use_mla else rng.standard_normal((sum(seq), cfg.num_kv_heads, cfg.effective_head_size_v)).astype(dt)
    layer.write_kv(k, v, cache, fill)
    md = attn.BatchMetadata(context_lens=context, query_lens=query, block_ids=block_ids, cache=cache)
    return SimpleNamespace(layer=layer, cache=cache, md=md)


def assert_close(got: np.ndarray, want: np.ndarray, io_dtype: str, kv_storage: str, what: str = "out"):
    got = np.asarray(got).astype(np.float64)
    assert not np.isnan(got).any(), f"{what}: NaN in the output (unwritten rows or poison read)"
    atol, rtol = tolerance(io_dtype, kv_storage)
    err = np.abs(got - want)
    bad = err > atol + rtol * np.abs(want)
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} elements off; max error {err.max():.3g} "
                           f"(atol {atol}, rtol {rtol}) at {np.unravel_index(err.argmax(), err.shape)}")


def valid_cpu_backends(cfg: attn.LayerConfig) -> list[str]:
    """Every registered backend that can serve cfg on this machine (whatever backends exist)."""
    return [c.backend for c in attn.explain(cfg).candidates if c.valid]


def cosine_to_unquantized(kv_cache_dtype: str, outlier_channel: bool, n: int = 600) -> np.ndarray:
    """Cosine similarity of each output row of a Llama-shaped fp32 layer (8 / 2 heads x 128) over a
    `kv_cache_dtype` cache of n random keys with the fp64 attention over the unquantized K / V (one
    K channel x20 when `outlier_channel`): the quality of a 4-bit format, 4 query rows x 8 heads."""
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=128, dtype="float32", kv_cache_dtype=kv_cache_dtype)
    layer = attn.Attention(cfg)
    rng = np.random.default_rng(3)
    k = rng.standard_normal((n, 2, 128)).astype(np.float32)
    if outlier_channel:
        k[:, :, 7] *= 20.0
    v = rng.standard_normal((n, 2, 128)).astype(np.float32)
    q = rng.standard_normal((4, 8, 128)).astype(np.float32)
    cache = layer.make_cache(-(-n // layer.block_size))
    blocks = list(range(cache.num_blocks))
    layer.write_kv(k, v, cache, attn.BatchMetadata(context_lens=[0], query_lens=[n], block_ids=[blocks], cache=cache))
    md = attn.BatchMetadata(context_lens=[n - 4], query_lens=[4], block_ids=[blocks], cache=cache)
    out = np.asarray(layer.forward(q, cache, md)).astype(np.float64)
    exact = reference_attention(q.astype(np.float64), [k.astype(np.float64)], [v.astype(np.float64)], query_lens=[4],
                                seq_lens=[n], scale=layer.scale)
    return (out * exact).sum(-1) / np.linalg.norm(out, axis=-1) / np.linalg.norm(exact, axis=-1)
