"""Shared test machinery: the fp64 NumPy reference, dtype rounding, the tolerance table and a
builder that fills a paged cache for a ragged batch through a layer's own write_kv."""
from __future__ import annotations

import functools
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


TURBOQUANT_DTYPES = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")
TURBOQUANT_BITS = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4), "turboquant_k3v4_nc": (3, 4),
                   "turboquant_3bit_nc": (3, 3)}  # vLLM's TQ_PRESETS: key bits (8 = fp8), value bits


@functools.lru_cache(maxsize=None)
def lloyd_max_centroids(d: int, bits: int) -> np.ndarray:
    """Lloyd-Max levels for N(0, 1/d), as vLLM's solve_lloyd_max computes them (double precision,
    levels started evenly over +-3.5 sigma, 200-step trapezoids over each decision interval, stop when
    no level moves by 1e-10), as float32."""
    n = 2 ** bits
    var = 1.0 / d
    sigma = math.sqrt(var)

    def density(x):
        return (1.0 / math.sqrt(2 * math.pi * var)) * math.exp(-x * x / (2 * var))

    def integral(f, a, b, steps=200):
        h = (b - a) / steps
        total = 0.5 * (f(a) + f(b))
        for i in range(1, steps):
            total += f(a + i * h)
        return total * h

    lo, hi = -3.5 * sigma, 3.5 * sigma
    levels = [lo + (hi - lo) * (i + 0.5) / n for i in range(n)]
    for _ in range(200):
        edges = [lo * 3] + [(levels[i] + levels[i + 1]) / 2.0 for i in range(n - 1)] + [hi * 3]
        moved = []
        for i in range(n):
            a, b = edges[i], edges[i + 1]
            mass = integral(density, a, b)
            moved.append(integral(lambda x: x * density(x), a, b) / mass if mass > 1e-15 else levels[i])
        if max(abs(m - c) for m, c in zip(moved, levels)) < 1e-10:
            break
        levels = moved
    return np.array(levels, np.float32)


def pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """b-bit codes along the last axis, code i at bit b*i little-endian (4 bits: two per byte)."""
    codes = np.asarray(codes, np.uint32)
    d = codes.shape[-1]
    out = np.zeros((*codes.shape[:-1], (d * bits + 7) // 8), np.uint32)
    for i in range(d):
        bit = i * bits
        out[..., bit // 8] |= (codes[..., i] << (bit % 8)) & 0xFF
        if bit % 8 + bits > 8:
            out[..., bit // 8 + 1] |= codes[..., i] >> (8 - bit % 8)
    return out.astype(np.uint8)


def fp16_bytes(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float16)[..., None].view(np.uint8)


def turboquant_slot(k: np.ndarray, v: np.ndarray, kv_cache_dtype: str):
    """vLLM's TurboQuant store (triton_turboquant_store.py) of k, v [..., d] (float32): the slot bytes
    [K | V | pad] and what attention reads, (k in the model's space, v) as float64. 3 / 4-bit keys:
    norm |k|, y = H (k / (norm + 1e-8)) / sqrt(d) (Sylvester order), the index of y's Lloyd-Max bucket,
    read as norm * c / |c| rotated back; fp8 keys: e4m3 codes. Values: uniform over [min, max]."""
    kb, vb = TURBOQUANT_BITS[kv_cache_dtype]
    k32, v32 = np.asarray(k, np.float32), np.asarray(v, np.float32)
    d = k32.shape[-1]
    if kb == 8:
        codes = np.clip(k32, -448, 448).astype(ml_dtypes.float8_e4m3fn)  # saturating, as Triton's cvt.rn.satfinite
        key = codes.view(np.uint8)
        k_read = codes.astype(np.float64)
    else:
        norm = np.sqrt((k32 * k32).sum(axis=-1, dtype=np.float32, keepdims=True)).astype(np.float32)
        y = walsh_hadamard(k32 / (norm + np.float32(1e-8))) * (np.float32(1) / np.sqrt(np.float32(d)))
        c = lloyd_max_centroids(d, kb)
        mid = ((c[:-1] + c[1:]) / np.float32(2)).astype(np.float32)
        idx = (y[..., None] >= mid).sum(axis=-1)
        key = np.concatenate([pack_bits(idx, kb), fp16_bytes(norm[..., 0])], axis=-1)
        cv = c[idx].astype(np.float32)
        unit = cv / np.sqrt((cv * cv).sum(axis=-1, keepdims=True) + np.float32(1e-16))
        k_read = walsh_hadamard(unit.astype(np.float64) * np.asarray(norm, np.float16).astype(np.float64)) / math.sqrt(d)
    top = 2 ** vb - 1
    mn, mx = v32.min(axis=-1, keepdims=True), v32.max(axis=-1, keepdims=True)
    scale = np.maximum((mx - mn) / np.float32(top), np.float32(1e-8)).astype(np.float32)
    vcodes = np.clip(((v32 - mn) / scale + np.float32(0.5)).astype(np.int32), 0, top)
    value = np.concatenate([pack_bits(vcodes, vb), fp16_bytes(scale[..., 0]), fp16_bytes(mn[..., 0])], axis=-1)
    v_read = vcodes * np.asarray(scale, np.float16).astype(np.float64) + np.asarray(mn, np.float16).astype(np.float64)
    slot = np.concatenate([key, value], axis=-1)
    if slot.shape[-1] % 2:
        slot = np.concatenate([slot, np.zeros((*slot.shape[:-1], 1), np.uint8)], axis=-1)
    return slot, k_read, v_read


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
    if cache.kv_cache_dtype in TURBOQUANT_DTYPES:
        batch.k_ref, batch.v_ref = [], []
        for k, v in zip(k_all, v_all):
            _, kr, vr = turboquant_slot(rounded(k, cfg.dtype), rounded(v, cfg.dtype), cache.kv_cache_dtype)
            batch.k_ref.append(kr)
            batch.v_ref.append(vr)
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


def written_cache(kv_cache_dtype: str, dtype: str, layout: str, seed: int, edit=None, scales=None, d: int = 64):
    """A 6-block cache (block size 16, 2 KV heads, head size d, `layout`) holding 20 tokens of random
    K (each vector scaled by 0.01 .. 30) and V written by write_kv into blocks 4 then 1, cast to
    `dtype`; `edit(k, v)` changes them first (outliers, constant vectors), `scales`: (k_scale,
    v_scale) set before the write. Returns (cache, k, v) with k, v as written."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((20, 2, d)) * rng.uniform(0.01, 30, (20, 2, 1))
    v = rng.standard_normal((20, 2, d))
    if edit is not None:
        edit(k, v)
    layer = attn.Attention(attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=d, dtype=dtype, kv_cache_dtype=kv_cache_dtype))
    cache = attn.KVCache(6, block_size=16, num_kv_heads=2, head_size=d, kv_cache_dtype=kv_cache_dtype, layout=layout)
    assert cache.dtype == "int8" and cache.kv_cache_dtype == kv_cache_dtype
    if scales is not None:
        cache.set_scales([scales[0]], [scales[1]])
    k, v = k.astype(NUMPY_DTYPES[dtype]), v.astype(NUMPY_DTYPES[dtype])
    md = attn.BatchMetadata(context_lens=[0], query_lens=[20], block_ids=[[4, 1]], cache=cache)
    layer.write_kv(k, v, cache, md)
    return cache, k, v


def torch_step(layer: attn.Attention, cache, seed: int = 2):
    """40 tokens of random bf16 torch K / V written into `cache` (blocks 3, 0, 2 in order) and
    attended by as many random queries, the way an engine calls attn on its own tensors: returns
    (k, v, q, out) as torch tensors and the block ids."""
    import torch
    rng = np.random.default_rng(seed)
    hkv, d, h = layer.config.num_kv_heads, layer.config.head_size, layer.config.num_heads

    def rand(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)

    k, v = rand(40, hkv, d), rand(40, hkv, d)
    blocks = [3, 0, 2][: -(-40 // layer.block_size)]
    md = attn.BatchMetadata(context_lens=[0], query_lens=[40], block_ids=[blocks], cache=cache)
    layer.write_kv(k, v, cache, md)
    q = rand(40, h, d)
    return k, v, q, layer.forward(q, cache, md), blocks
