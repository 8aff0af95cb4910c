"""Hypothesis fuzzing of the conversion layer: random NumPy / torch tensors and views (any dtype,
0..6 dims, transposed, stepped, reversed, overlapping, broadcast) given to KVCache.from_dlpack /
from_views and to Attention.write_kv / forward / run. Every call succeeds or raises attn.Error /
TypeError / ValueError with a message, and whatever attn accepts it writes only the bytes the
tensor's elements occupy: each tensor is a view into the middle of a larger buffer whose other
bytes (canaries around it, the gaps a view skips) are compared before and after.
Hostile DLPack capsules: test_dlpack_capsule_fuzz; BatchMetadata arguments: test_metadata_fuzz.
Bounded example counts; ATTN_FUZZ_EXAMPLES=N raises every test's count to at least N."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import attn
from fuzz_support import (LAYOUTS, cache_shapes, call, dlpack_args, exercise, frameworks, fuzz, guarded_tensors,
                          layout_of, shapes, view_of, view_ops)


# --- 1. random tensors into from_dlpack / from_views -------------------------------------------


def wrap_guarded(arena, what, wrap, *args, **kwargs):
    """wrap(*args, **kwargs) (a cache, or None where refused); wrapping writes no byte at all."""
    arena.snapshot()
    cache = call(wrap, *args, **kwargs)
    arena.check(what=what)
    return cache


def use_guarded(arena, cache, tensors, what):
    """exercise(cache) writes only bytes the wrapped tensors address."""
    exercise(cache, np.random.default_rng(len(what)))
    arena.check(writable=tensors, what=f"fill / write_kv of {what}")


def _from_dlpack_case(framework, data):
    if framework == "torch":
        pytest.importorskip("torch")
    kwargs = data.draw(dlpack_args())
    if data.draw(st.booleans()):  # a cache dtype and a shape for the layout: more of them are accepted
        layout = kwargs["layout"] if kwargs["layout"] in LAYOUTS[:4] else None
        dtypes = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"] if framework == "torch" else \
            [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
        if data.draw(st.booleans()):
            kwargs["head_size_v"] = data.draw(st.integers(0, 2))
        arena, tensor, recipe = data.draw(guarded_tensors(framework, cache_shapes(layout), dtypes, plain=True))
    else:
        arena, tensor, recipe = data.draw(guarded_tensors(framework))
    what = f"from_dlpack({recipe}, {kwargs})"
    cache = wrap_guarded(arena, what, attn.KVCache.from_dlpack, tensor, **kwargs)
    if cache is not None:
        assert cache.numpy().ctypes.data == layout_of(tensor)[0] and not cache.owns_storage
        use_guarded(arena, cache, [tensor], what)


@fuzz(120)
@given(data=st.data())
def test_from_dlpack_numpy(data):
    _from_dlpack_case("numpy", data)


@fuzz(80)
@given(data=st.data())
def test_from_dlpack_torch(data):
    _from_dlpack_case("torch", data)


@st.composite
def kv_view_pairs(draw, framework):
    """(arena, k, v, recipe): K and V views the way engines lay them out (halves of [K | V] rows,
    token- or head-major; the two planes of one tensor) or two random views of one buffer."""
    kind = draw(st.sampled_from(["halves", "head_major_halves", "planes", "random"]))
    if kind == "random":
        arena, t, recipe = draw(guarded_tensors(framework))
        flat = t.reshape(-1) if (t.ndim and (t.flags.c_contiguous if framework == "numpy" else t.is_contiguous())) else None
        if flat is None or t.ndim == 0 or t.shape[0] < 2:
            return arena, t, t, recipe + " k=v"
        half = t.shape[0] // 2
        k, v = view_of(t[:half], draw(view_ops(t.ndim)), framework), view_of(t[half:], draw(view_ops(t.ndim)), framework)
        return arena, k, v, recipe + f" split at {half}"
    nb, bs, h = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    dk, dv = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    lead = draw(st.sampled_from([0, 0, 2]))  # rows may carry padding no view addresses
    width = lead + dk + dv + draw(st.sampled_from([0, 0, 3]))
    shape = {"halves": (nb, bs, h, width), "head_major_halves": (nb, h, bs, width), "planes": (2, nb, bs, h, max(dk, 1))}[kind]
    dtypes = ["float32", "float16", "bfloat16", "float8_e4m3fn", "int32"] if framework == "torch" else \
        [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, np.int32]
    arena, t, recipe = draw(guarded_tensors(framework, st.just(shape), dtypes, plain=True))
    if t.shape != shape:  # the drawn view ops changed it: use the views as they are
        return arena, t, t, recipe + " k=v"
    if kind == "planes":
        k, v = t[0], t[1]
    elif draw(st.booleans()):  # [K | V] rows
        k, v = t[..., lead:lead + dk], t[..., lead + dk:lead + dk + dv]
    else:  # [V | K] rows
        v, k = t[..., lead:lead + dv], t[..., lead + dv:lead + dv + dk]
    if kind == "head_major_halves":
        k, v = (x.transpose(0, 2, 1, 3) if framework == "numpy" else x.permute(0, 2, 1, 3) for x in (k, v))
    return arena, k, v, recipe + f" {kind} lead={lead} dk={dk} dv={dv}"


def _from_views_case(framework, data):
    if framework == "torch":
        pytest.importorskip("torch")
    arena, k, v, recipe = data.draw(kv_view_pairs(framework))
    per_head = data.draw(st.booleans())
    what = f"from_views({recipe}, per_head_scales={per_head})"
    cache = wrap_guarded(arena, what, attn.KVCache.from_views, k, v, per_head_scales=per_head)
    if cache is not None:
        assert cache.strided and not cache.owns_storage
        use_guarded(arena, cache, [k, v], what)


@fuzz(120)
@given(data=st.data())
def test_from_views_numpy(data):
    _from_views_case("numpy", data)


@fuzz(80)
@given(data=st.data())
def test_from_views_torch(data):
    _from_views_case("torch", data)


# --- 1b. random tensors as q / k / v / out of a layer ------------------------------------------

T, H, HKV, D = 3, 2, 1, 8  # tokens, heads, kv heads, head size of the layer the tensors go to


def _layer_step():
    layer = attn.Attention(attn.LayerConfig(num_heads=H, num_kv_heads=HKV, head_size=D, dtype="float32", block_size=4))
    cache = layer.make_cache(4)
    cache.fill(0.5)
    md = attn.BatchMetadata(context_lens=[2], query_lens=[T], block_ids=[[3, 1]], cache=cache)
    return layer, cache, md, layer.plan(md, cache)


layer_shapes = st.one_of(shapes, st.sampled_from([(T, H, D), (T, H * D), (T, HKV, D), (T, HKV * D), (T, H, D + 1)]))
layer_dtypes = [np.float32, np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32, np.bool_]
torch_layer_dtypes = ["float32", "float32", "float16", "bfloat16", "float64", "int32", "bool"]


@fuzz(100)
@given(data=st.data(), framework=frameworks, use=st.sampled_from(["write_kv", "forward", "run"]))
def test_layer_tensor_checks(data, framework, use):
    def tensor(fits):
        if data.draw(st.booleans()):  # float32 in the shape the layer reads: more calls get past the checks
            return data.draw(guarded_tensors(framework, st.sampled_from(fits), ["float32"] if framework == "torch"
                                             else [np.float32], plain=True))
        return data.draw(guarded_tensors(framework, layer_shapes, torch_layer_dtypes if framework == "torch" else layer_dtypes))

    q_shapes, kv_shapes = [(T, H, D), (T, H * D)], [(T, HKV, D), (T, HKV * D)]
    inputs = [tensor(kv_shapes if use == "write_kv" else q_shapes), tensor(kv_shapes)]
    out = (None if data.draw(st.booleans()) else tensor(q_shapes)) if use != "write_kv" else None
    layer, cache, md, plan = _layer_step()
    for arena, _, _ in inputs + ([out] if out else []):
        arena.snapshot()
    (_, a, ra), (_, b, rb) = inputs
    o = out[1] if out else None
    if use == "write_kv":
        call(layer.write_kv, a, b, cache, md)
    elif use == "forward":
        call(layer.forward, a, cache, md, o)
    else:
        call(layer.run, plan, a, cache, o, k=b, v=b)
    for arena, _, recipe in inputs:
        arena.check(what=f"{use} input {recipe}")  # inputs are read, never written
    if out:
        out[0].check(writable=[o], what=f"{use} out {out[2]}")


# --- cases the fuzzing found ---------------------------------------------------------------------


def test_from_views_refuses_a_v_of_no_width():
    # head_size_v 0 means "= head_size" in the spec: an empty V view was once read and written
    # head_size wide from where it points, here the first half of the row that only K's view skips.
    row = np.zeros((1, 1, 1, 8), dtype=np.float32)
    k, v = row[..., 4:], row[..., :0]
    with pytest.raises(attn.Error, match=r"v.shape=\(1, 1, 1, 0\) invalid: expected a last dimension"):
        attn.KVCache.from_views(k, v)
    assert not row.any()
