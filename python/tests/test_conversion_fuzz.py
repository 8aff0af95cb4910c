"""Hypothesis fuzzing of the conversion layer: random NumPy / torch tensors and views (any dtype,
0..6 dims, transposed, stepped, reversed, overlapping, broadcast) given to KVCache.from_dlpack /
from_views and to Attention.write_kv / forward / run, hand-built DLPack capsules with hostile
metadata, and random BatchMetadata arguments. Every call succeeds or raises attn.Error /
TypeError / ValueError with a message, and whatever attn accepts it writes only the bytes the
tensor's elements occupy: each tensor is a view into the middle of a larger buffer whose other
bytes (canaries around it, the gaps a view skips) are compared before and after.
Bounded example counts; ATTN_FUZZ_EXAMPLES=N raises every test's count to at least N."""
import ctypes
import math
import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st

import attn

try:
    import torch
except ImportError:  # the torch cases skip themselves (pytest.importorskip)
    torch = None

FUZZ_EXAMPLES = int(os.environ.get("ATTN_FUZZ_EXAMPLES", "0"))


def fuzz(examples: int):
    return settings(max_examples=max(examples, FUZZ_EXAMPLES), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


ALLOWED = (attn.Error, TypeError, ValueError)


def call(fn, *args, allowed=ALLOWED, **kwargs):
    """fn's result, or None when it refused the input with one of `allowed` and a message."""
    try:
        result = fn(*args, **kwargs)
        event(f"{getattr(fn, '__name__', fn)} accepted")
        return result
    except allowed as e:
        assert str(e), f"{type(e).__name__} without a message"
        note(f"refused: {type(e).__name__}: {e}")
        event(f"{getattr(fn, '__name__', fn)} refused")
        return None


# --- guarded memory -------------------------------------------------------------------------

CANARY = 0xA5
PAD = 256  # canary bytes before and after the region the tensors lie in


def footprint(mask: np.ndarray, start: int, shape, byte_strides, itemsize: int) -> None:
    """Marks in `mask` every byte an array at byte `start` of it addresses (none when empty)."""
    if any(n <= 0 for n in shape):
        return
    offsets = np.array([start], dtype=np.int64)
    for n, s in zip(shape, byte_strides):
        if n == 1:
            continue  # an extent of 1 never steps by its stride (which may be any value, even past int64)
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    assert offsets.min() >= 0 and offsets.max() + itemsize <= mask.size, "the generator built a view outside its buffer"
    for b in range(itemsize):
        mask[offsets + b] = True


class Arena:
    """A byte buffer: canaries, then a `nbytes` region of random bytes the tensors are views of
    (starting `misalign` bytes past a 64-byte boundary), then canaries."""

    def __init__(self, nbytes: int, misalign: int, seed: int):
        self.raw = np.full(PAD + 64 + nbytes + PAD, CANARY, dtype=np.uint8)
        self.lo = PAD + (-(self.raw.ctypes.data + PAD)) % 64 + misalign
        self.hi = self.lo + nbytes
        self.raw[self.lo:self.hi] = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
        self.before = None

    @property
    def address(self) -> int:
        return self.raw.ctypes.data

    def numpy_region(self, dtype, shape) -> np.ndarray:
        return self.raw[self.lo:self.hi].view(dtype).reshape(shape)

    def torch_region(self, dtype, shape):
        return torch.from_numpy(self.raw)[self.lo:self.hi].view(dtype).reshape(shape)

    def snapshot(self) -> None:
        self.before = self.raw.copy()

    def mask_of(self, *tensors) -> np.ndarray:
        mask = np.zeros(self.raw.size, dtype=bool)
        for t in tensors:
            if t is not None:
                ptr, shape, strides, itemsize = layout_of(t)
                footprint(mask, ptr - self.address, shape, strides, itemsize)
        return mask

    def check(self, writable=(), what="") -> None:
        """The canaries, and every byte outside the `writable` tensors, are as at snapshot()."""
        changed = self.raw != self.before
        assert not changed[:self.lo].any() and not changed[self.hi:].any(), f"{what}: canary bytes overwritten"
        stray = changed & ~self.mask_of(*writable)
        assert not stray.any(), (f"{what}: {int(stray.sum())} bytes written that no tensor addresses, first at region "
                                 f"offset {int(np.argmax(stray)) - self.lo}")


def layout_of(t):
    """(data address, shape, byte strides, itemsize) of a NumPy array or torch tensor."""
    if isinstance(t, np.ndarray):
        return t.__array_interface__["data"][0], t.shape, t.strides, t.itemsize
    es = t.element_size()
    return t.data_ptr(), tuple(t.shape), tuple(s * es for s in t.stride()), es


# --- random tensors ---------------------------------------------------------------------------

NUMPY_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.uint8, np.int8, np.int32, np.int64, np.bool_,
                np.complex64, np.float64, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
TORCH_DTYPE_NAMES = ["float32", "float16", "bfloat16", "uint8", "int8", "int32", "int64", "bool", "complex64",
                     "float64", "float8_e4m3fn", "float8_e5m2"]
LAYOUTS = ["NHD", "HND", "HND_PAIRS", "MLA", "", "nhd", "NHD ", "XYZ", "MLA\0", "HND_PAIRS" * 40]

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=6).map(tuple)


@st.composite
def cache_shapes(draw, layout=None):
    """A shape from_dlpack may accept for `layout` (valid sizes for HND_PAIRS included)."""
    layout = layout or draw(st.sampled_from(LAYOUTS[:4]))
    nb, h = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    bs = draw(st.sampled_from([16, 32])) if layout == "HND_PAIRS" else draw(st.integers(1, 5))
    d = draw(st.sampled_from([2, 4, 8])) if layout == "HND_PAIRS" else draw(st.integers(1, 8))
    return {"NHD": (nb, 2, bs, h, d), "MLA": (nb, bs, d)}.get(layout, (nb, 2, h, bs, d))


@st.composite
def view_ops(draw, ndim):
    """A few view operations: (name, argument) pairs that view_of applies in order."""
    ops = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["transpose", "slice", "as_strided", "expand", "readonly"]))
        if kind == "transpose" and ndim > 1:
            ops.append((kind, tuple(draw(st.permutations(range(ndim))))))
        elif kind == "slice" and ndim:
            dims = [(draw(st.integers(0, 3)), draw(st.integers(-1, 6)), draw(st.sampled_from([1, 2, 3, -1, -2])))
                    for _ in range(ndim)]
            ops.append((kind, dims))
        elif kind == "as_strided":
            n = draw(st.integers(0, 5))
            ops.append((kind, (tuple(draw(st.integers(0, 4)) for _ in range(n)),
                               tuple(draw(st.integers(0, 6)) for _ in range(n)))))
        elif kind == "expand" and ndim:
            ops.append((kind, (draw(st.integers(0, ndim - 1)), draw(st.integers(1, 4)))))
        elif kind == "readonly":
            ops.append((kind, None))
    return ops


def view_of(t, ops, framework):
    """t viewed through `ops`; views the framework cannot make (torch's negative steps) are skipped,
    and as_strided views are shrunk to stay inside t's elements."""
    for kind, arg in ops:
        if kind == "transpose" and len(arg) == t.ndim:
            t = t.transpose(arg) if framework == "numpy" else t.permute(arg)
        elif kind == "slice" and len(arg) == t.ndim:
            index = []
            for start, stop, step in arg:
                if framework == "torch":
                    step = abs(step)
                index.append(slice(start, None if stop < 0 else stop, step))
            t = t[tuple(index)]
        elif kind == "as_strided" and t.size != 0 and (t.is_contiguous() if framework == "torch" else t.flags.c_contiguous):
            shape, strides = arg
            strides = strides[:len(shape)]
            reach = sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
            total = t.numel() if framework == "torch" else t.size
            if reach >= total:
                continue
            if framework == "numpy":
                # through an unsigned view of the same size: as_strided cannot spell ml_dtypes' dtypes
                u = np.lib.stride_tricks.as_strided(t.view(f"u{t.itemsize}"), shape, tuple(s * t.itemsize for s in strides),
                                                    writeable=True)
                t = u.view(t.dtype)
            else:
                t = t.as_strided(shape, strides)
        elif kind == "expand" and arg[0] < t.ndim and t.shape[arg[0]] > 0:
            dim, n = arg
            t = t[tuple(slice(0, 1) if d == dim else slice(None) for d in range(t.ndim))]
            shape = list(t.shape)
            shape[dim] = n
            t = np.broadcast_to(t, shape) if framework == "numpy" else t.expand(shape)
        elif kind == "readonly" and framework == "numpy":
            t = t.view()
            t.flags.writeable = False
    return t


@st.composite
def guarded_tensors(draw, framework, shape_strategy=None, dtypes=None, plain=False):
    """(arena, tensor, recipe): a random tensor viewing the middle of a canary-guarded buffer
    (plain: 64-byte aligned, usually no view ops, so that more of them are accepted)."""
    if framework == "torch":
        names = [n for n in (dtypes or TORCH_DTYPE_NAMES) if hasattr(torch, n)]
        dtype = getattr(torch, draw(st.sampled_from(names)))
        itemsize = torch.empty((), dtype=dtype).element_size()
    else:
        dtype = draw(st.sampled_from(dtypes or NUMPY_DTYPES))
        itemsize = np.dtype(dtype).itemsize
    shape = draw(shape_strategy if shape_strategy is not None else st.one_of(shapes, cache_shapes()))
    # torch views a dtype only at offsets that are a multiple of its size; NumPy goes anywhere.
    misalign = 0 if plain else draw(st.sampled_from([0, 0, 0, itemsize, 32] + ([1, 2] if framework == "numpy" else [])))
    arena = Arena(math.prod(shape) * itemsize, misalign, draw(st.integers(0, 2**32 - 1)))
    base = arena.numpy_region(dtype, shape) if framework == "numpy" else arena.torch_region(dtype, shape)
    ops = [] if plain and draw(st.booleans()) else draw(view_ops(len(shape)))
    recipe = f"{framework} {getattr(dtype, '__name__', dtype)} shape {shape} misalign {misalign} ops {ops}"
    note(recipe)
    return arena, view_of(base, ops, framework), recipe


frameworks = st.sampled_from(["numpy", "torch"] if torch is not None else ["numpy"])


# --- using what was accepted -------------------------------------------------------------------

IO_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def exercise(cache, rng):
    """What an engine does with a wrapped cache: fill it, then write random K/V through a layer of its
    geometry (where a backend serves that geometry; an error there is a refusal, not a failure)."""
    cache.fill(1.0)
    if cache.layout not in ("NHD", "HND", "HND_PAIRS"):
        return
    io = cache.dtype if cache.dtype in IO_DTYPES else "bfloat16"
    cfg = call(attn.LayerConfig, num_heads=cache.num_kv_heads, num_kv_heads=cache.num_kv_heads,
               head_size=cache.head_size, head_size_v=cache.head_size_v, dtype=io,
               kv_cache_dtype=cache.kv_cache_dtype, block_size=cache.block_size)
    layer = cfg and call(attn.Attention, cfg)
    if layer is None:
        return
    n = int(rng.integers(1, cache.num_blocks * cache.block_size + 1))
    blocks = rng.permutation(cache.num_blocks)[: -(-n // cache.block_size)]
    md = call(attn.BatchMetadata, context_lens=[0], query_lens=[n], block_ids=[[int(b) for b in blocks]], cache=cache)
    if md is None:
        return
    k = rng.standard_normal((n, cache.num_kv_heads, cache.head_size)).astype(IO_DTYPES[io])
    v = rng.standard_normal((n, cache.num_kv_heads, cache.head_size_v)).astype(IO_DTYPES[io])
    call(layer.write_kv, k, v, cache, md)


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


@st.composite
def dlpack_args(draw):
    return {"layout": draw(st.sampled_from(LAYOUTS)),
            "head_size_v": draw(st.one_of(st.integers(-3, 9), st.sampled_from([2**31 - 1, 2**31, -2**31 - 1, 2**63]))),
            "per_head_scales": draw(st.booleans())}


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


# --- 2. DLPack capsules with hostile metadata ---------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):  # DLPack v0.8, unversioned
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_DLTENSOR = b"dltensor"  # lives as long as the module: the capsules keep only its address

MIB = 1 << 20
_BUFFER = (ctypes.c_ubyte * MIB)()
_BUFFER_NP = np.ctypeslib.as_array(_BUFFER)
_MIDDLE = MIB // 2 - ctypes.addressof(_BUFFER) % 64  # 64-byte aligned, half a MiB either side


class HostileProducer:
    """A DLPack producer over the 1 MiB buffer whose every export carries the drawn metadata; it
    counts deleter calls (each export deleted at most once, never twice)."""

    def __init__(self, m):
        self.m, self.keep, self.exports, self.deleted = m, [], 0, 0
        self.deleter = DELETER(self._deleted)

    def _deleted(self, _):
        self.deleted += 1

    def capsule(self):
        m = self.m
        shape = (ctypes.c_int64 * max(len(m["shape"]), 1))(*m["shape"])
        strides = None if m["strides"] is None else (ctypes.c_int64 * max(len(m["strides"]), 1))(*m["strides"])
        mt = DLManagedTensor()
        mt.dl_tensor.data = ctypes.addressof(_BUFFER) + _MIDDLE + m["data_offset"]
        mt.dl_tensor.device = DLDevice(*m["device"])
        mt.dl_tensor.ndim = m["ndim"]
        mt.dl_tensor.dtype = DLDataType(*m["dtype"])
        mt.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        if strides is not None:
            mt.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        mt.dl_tensor.byte_offset = m["byte_offset"]
        mt.deleter = self.deleter
        self.keep.append((shape, strides, mt))
        self.exports += 1
        return _capsule_new(ctypes.addressof(mt), _DLTENSOR, None)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self.capsule()

    def __dlpack_device__(self):
        return tuple(self.m["device"])


CACHE_DTYPES = [(2, 32, 1), (2, 16, 1), (4, 16, 1), (10, 8, 1), (12, 8, 1)]  # DLPack (code, bits, lanes)


@st.composite
def hostile_metadata(draw):
    if draw(st.integers(0, 3)) == 0:  # a quarter: a float32 HND cache, so that the wrap and its use are reached
        return {"ndim": 5, "shape": list(draw(cache_shapes("HND"))), "strides": None, "dtype": (2, 32, 1),
                "device": (1, 0), "data_offset": 0, "byte_offset": draw(st.sampled_from([0, 64]))}
    ndim = draw(st.one_of(st.integers(0, 8), st.sampled_from([3, 5, 5]), st.integers(9, 128),
                          st.sampled_from([-1, -2**31, 129, 2**31 - 1])))
    listed = ndim if 0 <= ndim <= 128 else 8  # nanobind refuses other ndims before it reads the arrays
    if 0 <= ndim <= 8 and draw(st.booleans()):  # extents from_dlpack may accept for some layout
        if ndim == 5:
            shape = [draw(st.integers(1, 3)), 2, draw(st.sampled_from([1, 2, 16])), draw(st.integers(1, 2)),
                     draw(st.sampled_from([1, 2, 8]))]
        else:
            shape = [draw(st.integers(1, 4)) for _ in range(ndim)]
    else:
        extent = st.one_of(st.integers(-2, 5), st.sampled_from([-2**63, -2**31, 2**31 - 1, 2**31, 2**62, 2**63 - 1]))
        shape = [draw(extent) if d < 8 else 1 for d in range(listed)]
    strides_kind = draw(st.sampled_from(["null", "row_major", "random"]))
    if strides_kind == "null":
        strides = None
    elif strides_kind == "row_major":
        strides = [math.prod(max(n, 1) for n in shape[d + 1:]) for d in range(listed)]
    else:
        stride = st.one_of(st.integers(-4, 8), st.sampled_from([2**40, -2**40, 2**63 - 1, -2**63]))
        strides = [draw(stride) for _ in range(listed)]
    return {
        "ndim": ndim, "shape": shape, "strides": strides,
        "dtype": draw(st.one_of(st.sampled_from(CACHE_DTYPES), st.tuples(st.integers(0, 255), st.sampled_from(
            [0, 1, 4, 8, 16, 32, 64, 128, 255]), st.sampled_from([0, 1, 2, 4, 65535])))),
        "device": draw(st.one_of(st.just((1, 0)), st.tuples(st.sampled_from([1, 2, 3, 4, 7, 8, 13, 14, 0, -1, 2**31 - 1]),
                                                              st.sampled_from([0, 1, -1, 2**31 - 1])))),
        "data_offset": draw(st.sampled_from([0, 0, 1, 2, 4, 64, -64])),
        "byte_offset": draw(st.sampled_from([0, 0, 2, 64, 128])),
    }


def claimed_bytes(m):
    """The byte mask of the buffer the metadata claims, or None where it claims memory outside the
    buffer (a producer lying about its memory: nothing a consumer can check)."""
    mask = np.zeros(MIB, dtype=bool)
    ndim, shape = m["ndim"], m["shape"]
    if not 0 <= ndim <= 128 or any(n <= 0 for n in shape[:ndim]):
        return mask  # refused by nanobind, or no element at all
    if math.prod(shape[:ndim]) > 100_000:
        return None
    strides = m["strides"] or [math.prod(shape[d + 1:ndim]) for d in range(ndim)]
    code, bits, lanes = m["dtype"]
    itemsize = max(1, -(-bits * lanes // 8))
    start = _MIDDLE + m["data_offset"] + m["byte_offset"]
    lo = start + sum(min(0, (n - 1) * s) for n, s in zip(shape[:ndim], strides)) * itemsize
    hi = start + sum(max(0, (n - 1) * s) for n, s in zip(shape[:ndim], strides)) * itemsize + itemsize
    if lo < 0 or hi > MIB:
        return None
    footprint(mask, start, shape[:ndim], [s * itemsize for s in strides], itemsize)
    return mask


@fuzz(150)
@given(m=hostile_metadata(), args=dlpack_args(), direct=st.booleans())
def test_from_dlpack_hostile_capsules(m, args, direct):
    claimed = claimed_bytes(m)
    assume(claimed is not None)
    if m["ndim"] in (3, 5) and len(args["layout"]) % 2:  # about half: the layout that ndim declares
        args["layout"] = "MLA" if m["ndim"] == 3 else "HND"
    _BUFFER_NP[:] = CANARY
    producer = HostileProducer(m)
    cache = call(attn.KVCache.from_dlpack, producer.capsule() if direct else producer, **args,
                 allowed=ALLOWED + (BufferError,))
    assert (_BUFFER_NP == CANARY).all(), "from_dlpack wrote to the tensor it wraps"
    if cache is not None:
        assert m["device"][0] == 1 and 0 <= m["ndim"] <= 8, "accepted a non-CPU or absurd tensor"
        exercise(cache, np.random.default_rng(0))
        stray = (_BUFFER_NP != CANARY) & ~claimed
        assert not stray.any(), f"{int(stray.sum())} bytes written outside the claimed tensor"
    del cache
    assert producer.deleted <= producer.exports, "an export was deleted twice"


# --- 3. BatchMetadata from random lists and arrays ----------------------------------------------

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64]
HUGE = [2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -2**31 - 1, -2**63, -2**63 - 1]

values = st.one_of(st.integers(-3, 40), st.sampled_from(HUGE))


@st.composite
def int_containers(draw, n):
    """(container, has_float): n values as a list, tuple, NumPy or torch array of a random dtype,
    or a list of floats / NumPy scalars; has_float when some value is a float of any kind."""
    raw = draw(st.lists(values, min_size=n, max_size=n))
    kind = draw(st.sampled_from(["list", "tuple", "numpy", "numpy_float", "float_items", "numpy_scalars", "torch"]))
    if kind == "torch" and torch is None:
        kind = "list"
    if kind == "numpy":
        dtype = draw(st.sampled_from(INT_DTYPES + [np.bool_]))
        return np.array(raw, dtype=object).astype(dtype) if all(np.can_cast(np.min_scalar_type(x), dtype) for x in raw) \
            else np.array([x % 100 for x in raw], dtype=dtype), False
    if kind == "numpy_float":
        return np.array([x % 100 for x in raw], dtype=draw(st.sampled_from(FLOAT_DTYPES))), n > 0
    if kind == "float_items" and n:
        at = draw(st.integers(0, n - 1))
        raw[at] = draw(st.sampled_from([float(raw[at] % 100), raw[at] % 100 + 0.5, float("nan"), float("inf"),
                                        np.float32(2.0), np.float16(1.5), np.float64(3.0)]))
        return raw, True
    if kind == "numpy_scalars":
        return [np.int32(x % 100) if draw(st.booleans()) else np.int64(x % 100) for x in raw], False
    if kind == "torch":
        dtype = draw(st.sampled_from(["int32", "int64", "uint8", "float32", "bool"]))
        t = torch.tensor([x % 100 for x in raw], dtype=getattr(torch, dtype))
        return t, dtype == "float32" and n > 0
    return (tuple(raw) if kind == "tuple" else raw), False


@st.composite
def block_id_rows(draw, n, num_blocks):
    ids = st.one_of(st.integers(-2, max(num_blocks, 1) + 1), st.sampled_from(HUGE))
    rows = [draw(st.lists(ids, min_size=0, max_size=4)) for _ in range(n)]
    kind = draw(st.sampled_from(["lists", "numpy_2d", "numpy_rows", "float_2d", "flat"]))
    if kind == "numpy_2d" and rows:
        width = max(len(r) for r in rows)
        return np.array([[x % 64 for x in r] + [0] * (width - len(r)) for r in rows], dtype=np.int32), False
    if kind == "numpy_rows":
        return [np.array([x % 64 for x in r], dtype=draw(st.sampled_from(INT_DTYPES))) for r in rows], False
    if kind == "float_2d" and rows and all(rows):
        width = max(len(r) for r in rows)
        return np.array([[x % 64 for x in r] + [0] * (width - len(r)) for r in rows], dtype=np.float32), True
    if kind == "flat":
        return [x for r in rows for x in r], False
    return rows, False


@fuzz(200)
@given(data=st.data())
def test_batch_metadata(data):
    n = data.draw(st.integers(0, 4))
    query_lens, q_float = data.draw(int_containers(n))
    lens, l_float = data.draw(int_containers(data.draw(st.sampled_from([n, n, n + 1]))))
    which = data.draw(st.sampled_from(["context_lens", "seq_lens", "both", "neither"]))
    kwargs = {"query_lens": query_lens}
    if which in ("context_lens", "both"):
        kwargs["context_lens"] = lens
    if which in ("seq_lens", "both"):
        kwargs["seq_lens"] = lens
    geometry = data.draw(st.sampled_from(["cache", "sizes", "both"]))
    cache = attn.KVCache(data.draw(st.integers(1, 6)), block_size=data.draw(st.sampled_from([1, 4, 16])),
                         num_kv_heads=1, head_size=8, dtype="float32")
    if geometry in ("cache", "both"):
        kwargs["cache"] = cache
    if geometry in ("sizes", "both"):
        kwargs["block_size"] = data.draw(st.one_of(st.sampled_from([cache.block_size, 0]), st.integers(-2, 20), st.sampled_from(HUGE)))
        kwargs["num_blocks"] = data.draw(st.one_of(st.sampled_from([cache.num_blocks, 0]), st.integers(-2, 20), st.sampled_from(HUGE)))
    kwargs["block_ids"], b_float = data.draw(block_id_rows(n, cache.num_blocks))
    s_float = False
    if data.draw(st.booleans()):
        kwargs["slot_mapping"], s_float = data.draw(int_containers(data.draw(st.integers(0, 8))))
    kwargs["causal"] = data.draw(st.booleans())
    md = call(attn.BatchMetadata, **kwargs)
    if md is None:
        return
    floats = [name for name, f in [("query_lens", q_float), ("lens", l_float and which != "neither"),
                                   ("block_ids", b_float), ("slot_mapping", s_float)] if f]
    assert not floats, f"BatchMetadata accepted floats in {floats}: {kwargs}"
    q = [int(x) for x in (query_lens.tolist() if hasattr(query_lens, "tolist") else query_lens)]
    given_lens = [int(x) for x in (lens.tolist() if hasattr(lens, "tolist") else lens)]
    seq = [c + x for c, x in zip(given_lens, q)] if which == "context_lens" else given_lens
    assert md.num_seqs == n and md.num_tokens == sum(q), kwargs
    assert md.seq_lens.tolist() == seq, kwargs
    num_blocks = cache.num_blocks if "cache" in kwargs else kwargs["num_blocks"]
    slots = md.slot_mapping
    assert slots.size == sum(q) and ((slots >= 0) & (slots < md.block_size * num_blocks)).all(), kwargs


# --- cases the fuzzing found ---------------------------------------------------------------------


def test_from_views_refuses_a_v_of_no_width():
    # head_size_v 0 means "= head_size" in the spec: an empty V view was once read and written
    # head_size wide from where it points, here the first half of the row that only K's view skips.
    row = np.zeros((1, 1, 1, 8), dtype=np.float32)
    k, v = row[..., 4:], row[..., :0]
    with pytest.raises(attn.Error, match=r"v.shape=\(1, 1, 1, 0\) invalid: expected a last dimension"):
        attn.KVCache.from_views(k, v)
    assert not row.any()
