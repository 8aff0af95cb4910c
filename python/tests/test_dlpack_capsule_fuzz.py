"""Hypothesis fuzzing of KVCache.from_dlpack with hand-built DLPack capsules whose metadata is
hostile (any device, dtype, ndim, shape and strides, null or misaligned data, exports deleted at
odd times): every call succeeds or raises with a message, never writes the tensor it wraps, and
a cache it accepts is written only inside the bytes the capsule claims."""
import ctypes
import math

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

import attn
from fuzz_support import ALLOWED, CANARY, cache_shapes, call, dlpack_args, exercise, footprint, fuzz


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
