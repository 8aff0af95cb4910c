"""Arrays cross into the kernels without copies; bad arrays are rejected with clear errors."""
import ml_dtypes
import numpy as np
import pytest

import attn
from attn import _core
from helpers import assert_close, make_batch

CFG = dict(num_heads=4, num_kv_heads=2, head_size=32, dtype="bfloat16")


@pytest.fixture(scope="module")
def batch():
    layer = attn.Attention(attn.LayerConfig(**CFG))
    return make_batch(np.random.default_rng(7), layer, [10, 0], [1, 6])


def address(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_kernels_see_the_callers_memory(dtype):
    a = np.zeros((6, 4, 32), dtype=dtype)
    assert _core._data_address(a) == address(a)
    view = a[2:, 1:3]  # an outer-strided slice, as from a fused qkv projection
    assert _core._data_address(view) == address(view)
    assert _core._data_address(a, writable=True) == address(a)


def test_out_is_written_in_place(batch):
    out = np.full((batch.md.num_tokens, 4, 32), np.nan, dtype=ml_dtypes.bfloat16)
    result = batch.layer.forward(batch.q, batch.cache, batch.md, out=out)
    assert result is out
    assert_close(out, batch.reference(), "bfloat16", batch.cache.dtype)


def test_forward_reads_the_input_as_modified(batch):
    q = batch.q.copy()
    first = batch.layer.forward(q, batch.cache, batch.md).astype(np.float32)
    q[...] = 0  # no cached copy of the old q anywhere: zero logits → the mean of V
    second = batch.layer.forward(q, batch.cache, batch.md).astype(np.float32)
    assert not np.array_equal(first, second)
    third = batch.layer.forward(batch.q, batch.cache, batch.md).astype(np.float32)
    np.testing.assert_array_equal(first, third)


def test_new_output_matches_the_input_kind(batch):
    out = batch.layer.forward(batch.q, batch.cache, batch.md)
    assert isinstance(out, np.ndarray) and out.dtype == ml_dtypes.bfloat16 and out.shape == (7, 4, 32)


def test_strided_rows_are_read_in_place(batch):
    # q as a slice of a wider buffer (head dimension contiguous, rows strided): no copy, same result.
    wide = np.zeros((batch.md.num_tokens, 6, 32), dtype=ml_dtypes.bfloat16)
    wide[:, 1:5] = batch.q
    out_wide = np.zeros((batch.md.num_tokens, 8, 32), dtype=ml_dtypes.bfloat16)
    batch.layer.forward(wide[:, 1:5], batch.cache, batch.md, out=out_wide[:, 2:6])
    dense = batch.layer.forward(batch.q, batch.cache, batch.md)
    np.testing.assert_array_equal(out_wide[:, 2:6].astype(np.float32), dense.astype(np.float32))
    assert not out_wide[:, :2].astype(np.float32).any() and not out_wide[:, 6:].astype(np.float32).any()


def test_non_contiguous_last_dimension_is_rejected(batch):
    q2 = np.repeat(batch.q, 2, axis=2)[:, :, ::2]
    with pytest.raises(ValueError, match=r"q.strides=.*contiguous last dimension.*ascontiguousarray"):
        batch.layer.forward(q2, batch.cache, batch.md)
    swapped = np.ascontiguousarray(batch.q.transpose(0, 2, 1)).transpose(0, 2, 1)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        batch.layer.forward(swapped, batch.cache, batch.md)
    with pytest.raises(ValueError, match="non-negative strides"):
        batch.layer.forward(batch.q[::-1], batch.cache, batch.md)


def test_wrong_dtypes_raise_type_error(batch):
    with pytest.raises(TypeError, match="q.dtype=float64 invalid: expected float32, float16 or bfloat16"):
        batch.layer.forward(batch.q.astype(np.float64), batch.cache, batch.md)
    with pytest.raises(TypeError, match="q.dtype=float16 invalid: expected the layer dtype bfloat16"):
        batch.layer.forward(batch.q.astype(np.float16), batch.cache, batch.md)
    out32 = np.zeros((7, 4, 32), dtype=np.float32)
    with pytest.raises(TypeError, match="out.dtype=float32 invalid: expected the layer dtype bfloat16"):
        batch.layer.forward(batch.q, batch.cache, batch.md, out=out32)
    with pytest.raises(TypeError, match="int32"):
        batch.layer.forward(np.zeros((7, 4, 32), dtype=np.int32), batch.cache, batch.md)
    with pytest.raises(TypeError, match="q=<list"):
        batch.layer.forward([[0.0]], batch.cache, batch.md)


def test_read_only_output_is_rejected(batch):
    out = np.zeros((7, 4, 32), dtype=ml_dtypes.bfloat16)
    out.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        batch.layer.forward(batch.q, batch.cache, batch.md, out=out)
    q = batch.q.copy()
    q.flags.writeable = False  # inputs may be read-only
    batch.layer.forward(q, batch.cache, batch.md)


def test_wrong_shapes_name_the_argument(batch):
    with pytest.raises(attn.Error, match=r"q"):
        batch.layer.forward(batch.q[:, :3], batch.cache, batch.md)
    with pytest.raises(ValueError, match=r"out"):
        batch.layer.forward(batch.q, batch.cache, batch.md, out=np.zeros((7, 4, 16), dtype=ml_dtypes.bfloat16))
    k = np.zeros((7, 3, 32), dtype=np.float32)
    with pytest.raises(ValueError, match=r"\bk\b"):
        batch.layer.write_kv(k, k, batch.cache, batch.md)


def test_cache_from_another_layer_is_rejected(batch):
    other = attn.Attention(attn.LayerConfig(**dict(CFG, head_size=64)), "reference").make_cache(4)
    with pytest.raises(ValueError, match="head_size"):
        batch.layer.forward(batch.q, other, batch.md)
