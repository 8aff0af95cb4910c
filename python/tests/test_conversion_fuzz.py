"""Hypothesis fuzzing of the conversion layer: random NumPy / torch tensors and views (any dtype,
0..6 dims, transposed, stepped, reversed, overlapping, broadcast) given to KVCache.from_dlpack /
from_views and to Attention.write_kv / forward / run, hand-built DLPack capsules with hostile
metadata, and random BatchMetadata arguments. Every call succeeds or raises attn.Error /
TypeError / ValueError with a message, and whatever attn accepts it writes only the bytes the
tensor's elements occupy: each tensor is a view into the middle of a larger buffer whose other
bytes (canaries around it, the gaps a view skips) are compared before and after.
Bounded example counts; ATTN_FUZZ_EXAMPLES=N raises every test's count to at least N."""
import numpy as np
import pytest

import attn


# --- cases the fuzzing found ---------------------------------------------------------------------


def test_from_views_refuses_a_v_of_no_width():
    # head_size_v 0 means "= head_size" in the spec: an empty V view was once read and written
    # head_size wide from where it points, here the first half of the row that only K's view skips.
    row = np.zeros((1, 1, 1, 8), dtype=np.float32)
    k, v = row[..., 4:], row[..., :0]
    with pytest.raises(attn.Error, match=r"v.shape=\(1, 1, 1, 0\) invalid: expected a last dimension"):
        attn.KVCache.from_views(k, v)
    assert not row.any()
