"""attn.attention: a drop-in for torch.nn.functional.scaled_dot_product_attention (its arguments,
defaults and results), served by the same selector and kernels as the paged API.

Dense K and V ("bhsd" / "bshd") are read in place: a cache over the tensors themselves at their
strides, one block per sequence (KVCache.from_views), nothing copied. K/V that cannot be viewed
(another dtype than the cache's, K and V at different strides, a "thd" batch, a sequence longer than
a block may be) go into a paged cache through the layer's write_kv: one copy, at memory speed. q is
read in place when its layout allows and the output is written once. NumPy arrays (ml_dtypes
bfloat16 included) and torch CPU tensors both work; the output has q's array type and dtype.
"""
from __future__ import annotations

import atexit
import math
import operator
import threading

from ._core import Attention, BatchMetadata, Error, KVCache, LayerConfig

_LAYOUTS = ("bhsd", "bshd", "thd")
_MAX_LAYERS = 256  # distinct (config, scale, sinks, backend) kept; a model has a handful
_layers: dict = {}
_layers_lock = threading.Lock()
# Released before the interpreter tears the extension down (nanobind reports survivors as leaks).
atexit.register(_layers.clear)


def _dtype_name(x) -> str:
    name = str(x.dtype)
    return name[len("torch."):] if name.startswith("torch.") else name


def _layer(cfg: LayerConfig, scale, sinks, backend) -> Attention:
    """One Attention per distinct layer, reused across calls (the selector caches decisions too)."""
    key = (cfg, scale, None if sinks is None else tuple(float(s) for s in sinks), backend)
    with _layers_lock:
        layer = _layers.get(key)
        if layer is None:
            if len(_layers) >= _MAX_LAYERS:
                _layers.clear()
            layer = _layers[key] = Attention(cfg, backend, scale=scale, sinks=key[2])
    return layer


def _tokens_major(x, layout: str):
    """[B, H, S, D] / [B, S, H, D] → [B*S, H, D] (a view where the strides allow, else a copy)."""
    if layout == "bhsd":
        x = x.swapaxes(1, 2)
    b, s, h, d = x.shape
    return x.reshape(b * s, h, d)


def _lengths(cu_seqlens, total: int, arg: str) -> list[int]:
    if cu_seqlens is None:
        return [total]
    values = cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else list(cu_seqlens)
    try:  # operator.index: integers only (int() would truncate a float offset silently)
        cu = [operator.index(c) for c in values]
    except TypeError:
        raise TypeError(f"{arg}={values!r} invalid: expected integer offsets (an int32 / int64 array or a list of "
                        "ints)") from None
    if not cu or cu[0] != 0 or cu[-1] != total or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"{arg}={cu} invalid: expected non-decreasing offsets from 0 to {total} (the token count)")
    return [b - a for a, b in zip(cu, cu[1:])]


def _dense_view(layer: Attention, q, k, v, layout: str):
    """A cache over dense K / V themselves (one block per sequence at the tensors' strides), or
    None where they cannot be read in place (the caller copies them instead)."""
    storage = _dtype_name(q) if layer.kv_cache_dtype == "auto" else layer.kv_cache_dtype
    if _dtype_name(k) != storage or _dtype_name(v) != storage:
        return None
    kv = (k, v) if layout == "bshd" else (k.swapaxes(1, 2), v.swapaxes(1, 2))  # [B, S, H, D]
    try:
        return KVCache.from_views(*kv)
    except (Error, TypeError, ValueError):  # strides K and V do not share, rows not contiguous, ...
        return None


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
              scale: float | None = None, enable_gqa: bool = False, *, window: int | None = None,
              softcap: float | None = None, sinks=None, layout: str = "bhsd", cu_seqlens_q=None, cu_seqlens_k=None,
              backend: str | None = None):
    """torch.nn.functional.scaled_dot_product_attention's contract, on attn's kernels.

    query [B, Hq, Sq, D], key / value [B, Hkv, Skv, D / Dv] (layout "bhsd", SDPA's) → [B, Hq, Sq, Dv].
    attn_mask: bool (True = attend) or additive float, broadcastable to [B, Hq, Sq, Skv]. is_causal:
    query i sees keys 0..i (SDPA's top-left alignment). enable_gqa: Hkv may divide Hq (else they
    must be equal, as in SDPA). dropout_p must be 0 (inference). scale: None = 1/sqrt(D).
    attn's extras, as keywords: window (each query sees at most `window` keys ending at its own
    position), softcap (logits → softcap * tanh(logits / softcap)), sinks ([Hq] sink logits),
    layout ("bshd", or "thd" with flash-attn style cu_seqlens_q / cu_seqlens_k; for those, causal is
    bottom-right aligned as in decoding), backend (force one).

    What attn's kernels do not express is computed by torch's own SDPA on the same torch tensors
    (identical results by definition): an attn_mask, Sq > Skv, is_causal with Sq != Skv, and inputs that
    require gradients (attn computes no backward). NumPy inputs there raise a ValueError.
    """
    if dropout_p:
        raise ValueError(f"dropout_p={dropout_p} invalid: expected 0.0 (attn computes inference attention)")
    for name, x in (("query", query), ("key", key), ("value", value)):
        device = getattr(x, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise ValueError(f"{name}.device={device} invalid: expected cpu (attn.attention runs attn's CPU kernels)")
    if layout != "thd" and len(query.shape) == 4 and len(key.shape) == 4:
        heads_axis = 1 if layout == "bhsd" else 2
        hq, hkv = query.shape[heads_axis], key.shape[heads_axis]
        if hq != hkv and not enable_gqa:
            raise ValueError(f"key heads={hkv} invalid: expected query's {hq} heads, or enable_gqa=True "
                             f"(grouped heads: {hq} must be a multiple of {hkv})")
    seq_axis = 2 if layout == "bhsd" else 1
    dense4 = layout != "thd" and len(query.shape) == 4 and len(key.shape) == 4
    # attn's sequences hold their queries: Sq > Skv fits neither its causal nor its non-causal form.
    top_left = dense4 and (query.shape[seq_axis] > key.shape[seq_axis] or
                           (is_causal and query.shape[seq_axis] != key.shape[seq_axis]))
    needs_grad = any(getattr(x, "requires_grad", False) for x in (query, key, value))
    if attn_mask is not None or top_left or needs_grad:
        return _torch_sdpa(query, key, value, attn_mask, is_causal, scale, enable_gqa, layout,
                           "attn_mask" if attn_mask is not None else "requires_grad" if needs_grad else "is_causal",
                           window, softcap, sinks)
    return _attention(query, key, value, causal=is_causal, scale=scale, window=window, softcap=softcap, sinks=sinks,
                      layout=layout, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, backend=backend)


def _torch_sdpa(query, key, value, attn_mask, is_causal, scale, enable_gqa, layout, why, window, softcap, sinks):
    """The cases attn's kernels do not take, on torch's SDPA (torch tensors in bhsd / bshd only)."""
    what = {"attn_mask": "an attn_mask", "requires_grad": "inputs that require gradients",
            "is_causal": "Sq > Skv, or is_causal with Sq != Skv (top-left aligned)"}[why]
    if not all(_is_torch(x) for x in (query, key, value)) or layout == "thd":
        raise ValueError(f"{why} invalid here: {what} is served by torch's scaled_dot_product_attention, which needs "
                         f"torch tensors in layout 'bhsd' or 'bshd' (got {type(query).__name__}, layout={layout!r})")
    if window or softcap or sinks is not None:
        raise ValueError(f"window / softcap / sinks invalid with {what}: torch's scaled_dot_product_attention, which "
                         "serves that case, has none of them")
    import torch.nn.functional as F

    if layout == "bshd":
        query, key, value = (x.transpose(1, 2) for x in (query, key, value))
        if attn_mask is not None and attn_mask.dim() == 4:
            attn_mask = attn_mask.transpose(1, 2)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                         enable_gqa=enable_gqa)
    return out.transpose(1, 2) if layout == "bshd" else out


def _attention(q, k, v, *, causal: bool, scale: float | None = None, window: int | None = None,
               softcap: float | None = None, sinks=None, layout: str = "bhsd", cu_seqlens_q=None, cu_seqlens_k=None,
               backend: str | None = None):
    """Dense attention: softmax(q k^T * scale) v per head, with grouped K/V heads (GQA/MQA).

    layout: "bhsd" (q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D/Dv]; torch SDPA's), "bshd" ([B, S, H, D]) or
    "thd" (q [Tq, Hq, D], k/v [Tk, Hkv, D], one sequence, or several given by cu_seqlens_q /
    cu_seqlens_k offsets as in flash-attn's varlen API). The output has q's layout.
    causal: query i of a sequence sees keys up to Skv - Sq + i (bottom-right aligned, as in
    decoding); for Sq == Skv this is torch's is_causal=True. scale: None means 1/sqrt(D).
    window: each query sees at most `window` keys ending at its own position (None: all).
    softcap: logits → softcap * tanh(logits / softcap). sinks: [Hq] per-head sink logits.
    backend: force a backend (else the selector chooses, as for attn.Attention).
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout={layout!r} invalid: expected one of {', '.join(_LAYOUTS)}")
    want_ndim = 3 if layout == "thd" else 4
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != want_ndim:
            raise ValueError(f"{name}.shape={tuple(x.shape)} invalid: expected {want_ndim} dimensions for layout={layout!r}")
    if layout == "thd":
        qt, kt, vt = q, k, v
        q_lens = _lengths(cu_seqlens_q, q.shape[0], "cu_seqlens_q")
        kv_lens = _lengths(cu_seqlens_k, k.shape[0], "cu_seqlens_k")
    else:
        if cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise ValueError(f"cu_seqlens_q / cu_seqlens_k apply to layout='thd' only, not {layout!r}")
        batch = q.shape[0]
        if k.shape[0] != batch or v.shape[0] != batch:
            raise ValueError(f"k.shape[0]={k.shape[0]}, v.shape[0]={v.shape[0]} invalid: expected q's batch {batch}")
        qt = _tokens_major(q, layout)
        kt = vt = None  # [B*S, H, D] K / V: a copy of non-contiguous tensors, made only if they cannot be viewed
        seq_axis = 2 if layout == "bhsd" else 1
        q_lens, kv_lens = [q.shape[seq_axis]] * batch, [k.shape[seq_axis]] * batch
    if len(q_lens) != len(kv_lens):
        raise ValueError(f"cu_seqlens_q has {len(q_lens)} sequences, cu_seqlens_k {len(kv_lens)}: expected the same")
    heads, head_size = qt.shape[1], qt.shape[2]
    # thd [T, H, D], bhsd [B, H, S, D], bshd [B, S, H, D]
    kv_heads = k.shape[2] if layout == "bshd" else k.shape[1]
    head_size_v = v.shape[-1]
    cfg = LayerConfig(num_heads=heads, num_kv_heads=kv_heads, head_size=head_size, head_size_v=head_size_v,
                      dtype=_dtype_name(q), sliding_window=window or 0, logits_soft_cap=softcap or 0.0,
                      has_sink=sinks is not None, attn_type="decoder" if causal else "encoder_only")
    layer = _layer(cfg, scale, sinks, backend)

    if layout != "thd":
        view = _dense_view(layer, q, k, v, layout)
        if view is not None:
            md = BatchMetadata(seq_lens=kv_lens, query_lens=q_lens, block_ids=[[b] for b in range(batch)], cache=view,
                               causal=causal)
            out = layer.forward(qt, view, md).reshape(batch, q_lens[0], heads, -1)
            return out.swapaxes(1, 2) if layout == "bhsd" else out
        kt, vt = _tokens_major(k, layout), _tokens_major(v, layout)
    block_size = layer.block_size
    per_seq = [max(1, math.ceil(n / block_size)) for n in kv_lens]
    starts = [sum(per_seq[:i]) for i in range(len(per_seq))]
    block_ids = [list(range(s, s + n)) for s, n in zip(starts, per_seq)]
    cache = layer.make_cache(num_blocks=sum(per_seq), block_size=block_size)
    keys = BatchMetadata(context_lens=[0] * len(kv_lens), query_lens=kv_lens, block_ids=block_ids, cache=cache)
    layer.write_kv(kt, vt, cache, keys)
    md = BatchMetadata(seq_lens=kv_lens, query_lens=q_lens, block_ids=block_ids, cache=cache, causal=causal)
    out = layer.forward(qt, cache, md)
    if layout == "thd":
        return out
    out = out.reshape(q.shape[0], q_lens[0], heads, out.shape[2])
    return out.swapaxes(1, 2) if layout == "bhsd" else out
