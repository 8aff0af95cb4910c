"""What the conversion fuzz tests share (test_conversion_fuzz, test_dlpack_capsule_fuzz,
test_metadata_fuzz): bounded example counts (ATTN_FUZZ_EXAMPLES=N raises every test's count to at
least N), `call` (a result or a refusal with a message), guarded memory (each tensor a view into
the middle of a larger buffer whose other bytes are compared before and after), random tensors
and views, and `exercise` (what an engine does with a wrapped cache)."""
import math
import os

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, event, note, settings
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


@st.composite
def dlpack_args(draw):
    return {"layout": draw(st.sampled_from(LAYOUTS)),
            "head_size_v": draw(st.one_of(st.integers(-3, 9), st.sampled_from([2**31 - 1, 2**31, -2**31 - 1, 2**63]))),
            "per_head_scales": draw(st.booleans())}
