"""The same kernels on PyTorch CPU tensors through DLPack (bfloat16 included), without copies.
Skipped where torch is not installed: CI never downloads it."""
import numpy as np
import pytest

import attn
from helpers import assert_close, make_batch, valid_cpu_backends

torch = pytest.importorskip("torch", reason="torch is not installed (CI does not download it)")

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def as_torch(a: np.ndarray, dtype: str):
    # float32 → bf16/f16 rounds to nearest even in torch as in NumPy / ml_dtypes: the same values.
    return torch.from_numpy(np.asarray(a, dtype=np.float32)).to(TORCH_DTYPES[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_tensors_match_reference(dtype):
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype=dtype, sliding_window=20)
    for backend in valid_cpu_backends(cfg):
        layer = attn.Attention(cfg, backend)
        b = make_batch(np.random.default_rng(3), layer, [30, 0], [1, 11])
        q = as_torch(b.q.astype(np.float32), dtype)
        out = layer.forward(q, b.cache, b.md)
        assert isinstance(out, torch.Tensor) and out.dtype == TORCH_DTYPES[dtype] and tuple(out.shape) == (12, 8, 64)
        want = b.reference(window=20)
        assert_close(out.float().numpy(), want, dtype, b.cache.dtype, backend)


def test_torch_out_written_in_place_and_inputs_not_copied():
    from attn import _core

    cfg = attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=32, dtype="bfloat16")
    layer = attn.Attention(cfg)
    b = make_batch(np.random.default_rng(4), layer, [10], [3])
    q = as_torch(b.q.astype(np.float32), "bfloat16")
    assert _core._data_address(q) == q.data_ptr()
    out = torch.full((3, 4, 32), float("nan"), dtype=torch.bfloat16)
    assert _core._data_address(out, writable=True) == out.data_ptr()
    assert layer.forward(q, b.cache, b.md, out=out) is out
    assert_close(out.float().numpy(), b.reference(), "bfloat16", b.cache.dtype)
    # write_kv reads torch k / v too.
    k = torch.zeros((3, 2, 32), dtype=torch.bfloat16)
    layer.write_kv(k, k, b.cache, b.md)


def test_torch_errors():
    cfg = attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=32, dtype="bfloat16")
    layer = attn.Attention(cfg)
    b = make_batch(np.random.default_rng(5), layer, [4], [2])
    with pytest.raises(TypeError, match="q.dtype=float32 invalid: expected the layer dtype bfloat16"):
        layer.forward(torch.zeros((2, 4, 32)), b.cache, b.md)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        layer.forward(torch.zeros((2, 32, 4), dtype=torch.bfloat16).transpose(1, 2), b.cache, b.md)
    assert attn.LayerConfig(dtype=torch.float16).dtype == "float16"
