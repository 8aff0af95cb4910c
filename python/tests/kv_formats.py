"""What a cache holds, modeled in NumPy: dtype rounding, fp8 with per-head scales, and vLLM's byte
formats (per-token-head int8 / fp8, int4 with its Hadamard rotation, NVFP4, TurboQuant slots), each
returning the values the cache reads back as the fp64 reference sees them."""
from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
FP8_DTYPES = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


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
