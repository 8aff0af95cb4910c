"""Hypothesis fuzzing of BatchMetadata's arguments: random lists, tuples, NumPy and torch arrays of
any integer or float dtype, huge values, ragged and flat block tables. Every call succeeds or
raises with a message; floats are refused, and what is accepted has the lengths and slots given."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import attn
from fuzz_support import call, fuzz

try:
    import torch
except ImportError:  # int_containers then draws no torch tensors
    torch = None


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
