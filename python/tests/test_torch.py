"""The same kernels on PyTorch CPU tensors through DLPack (bfloat16 included), without copies:
q / k / v / out, flat [tokens, heads * head_size] q, integer metadata tensors, caches exported to
torch in their storage dtype and engine-owned torch caches. scripts/setup.sh installs torch."""
import numpy as np
import pytest

import attn
from helpers import assert_close, make_batch, valid_cpu_backends

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")

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


def test_torch_tensors_of_every_kind_are_seen_in_place():
    # Plain tensors take a fast import path; views at an offset, subclasses (Parameter) and
    # tensors that require gradients the general one: all give the tensor's own memory.
    from attn import _core

    base = torch.randn(6, 4, 32, dtype=torch.bfloat16)
    for t in (base, base[2:], base[:, 1:3], torch.nn.Parameter(base.clone(), requires_grad=False),
              base.clone().requires_grad_(), base.float()):
        assert _core._data_address(t) == t.data_ptr()
        assert _core._data_address(t.detach(), writable=True) == t.data_ptr()
    with pytest.raises(TypeError, match=r"array.dtype=torch.int32 invalid: expected float32"):
        _core._data_address(torch.zeros(3, dtype=torch.int32))


def test_torch_errors():
    cfg = attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=32, dtype="bfloat16")
    layer = attn.Attention(cfg)
    b = make_batch(np.random.default_rng(5), layer, [4], [2])
    with pytest.raises(TypeError, match="q.dtype=float32 invalid: expected the layer dtype bfloat16"):
        layer.forward(torch.zeros((2, 4, 32)), b.cache, b.md)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        layer.forward(torch.zeros((2, 32, 4), dtype=torch.bfloat16).transpose(1, 2), b.cache, b.md)
    assert attn.LayerConfig(dtype=torch.float16).dtype == "float16"


def test_torch_flat_q_metadata_tensors_and_cache_views():
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16")
    layer = attn.Attention(cfg)
    b = make_batch(np.random.default_rng(6), layer, [25, 40], [3, 1])
    q = as_torch(b.q.astype(np.float32), "bfloat16").reshape(4, 8 * 64)  # vLLM passes q as [T, H*D]
    md = attn.BatchMetadata(context_lens=torch.tensor([25, 40]), query_lens=torch.tensor([3, 1], dtype=torch.int32),
                            block_ids=torch.from_numpy(np.where(b.md.block_table < 0, 0, b.md.block_table)), cache=b.cache)
    out = layer.forward(q, b.cache, md)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (4, 8 * 64)
    assert_close(out.float().reshape(4, 8, 64).numpy(), b.reference(), "bfloat16", b.cache.dtype)
    # The cache seen from torch: same memory, torch.bfloat16, the declared shape.
    t = torch.from_dlpack(b.cache)
    assert t.dtype == torch.bfloat16 and tuple(t.shape) == b.cache.shape and t.data_ptr() == b.cache.numpy().ctypes.data
    np.testing.assert_array_equal(t.view(torch.int16).numpy(), b.cache.numpy().view(np.int16))


@pytest.mark.parametrize("kv_cache_dtype,torch_dtype", [("fp8_e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2"),
                                                        ("float16", "float16"), ("auto", "bfloat16")])
def test_torch_sees_every_cache_dtype(kv_cache_dtype, torch_dtype):
    cache = attn.KVCache(2, block_size=16, num_kv_heads=2, head_size=64, kv_cache_dtype=kv_cache_dtype)
    cache.fill(1.5)
    t = torch.from_dlpack(cache)
    assert t.dtype == getattr(torch, torch_dtype) and tuple(t.shape) == cache.shape
    assert (t.float() == 1.5).all()


def test_engine_owned_torch_cache():
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16")
    layer = attn.Attention(cfg)
    engine = torch.zeros(layer.kv_cache_shape(num_blocks=5), dtype=getattr(torch, layer.kv_cache_dtype))
    cache = attn.KVCache.from_dlpack(engine, layout=layer.kv_cache_layout)
    assert not cache.owns_storage and cache.numpy().ctypes.data == engine.data_ptr()
    rng = np.random.default_rng(7)
    k, v = (torch.from_numpy(rng.standard_normal((20, 2, 64), dtype=np.float32)).to(torch.bfloat16) for _ in range(2))
    md = attn.BatchMetadata(context_lens=[0], query_lens=[20], block_ids=[[3, 1, 4, 0, 2][: -(-20 // layer.block_size)]],
                            cache=cache)
    layer.write_kv(k, v, cache, md)
    q = torch.from_numpy(rng.standard_normal((20, 8, 64), dtype=np.float32)).to(torch.bfloat16)
    out = layer.forward(q, cache, md)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(0, 1), k.float().repeat_interleave(4, 1).transpose(0, 1),
        v.float().repeat_interleave(4, 1).transpose(0, 1), is_causal=True).transpose(0, 1)
    assert_close(out.float().numpy(), want.double().numpy(), "bfloat16", "bfloat16")
    with pytest.raises(attn.Error, match="tensor.strides"):
        attn.KVCache.from_dlpack(engine.transpose(3, 4).contiguous().transpose(3, 4))


def test_from_dlpack_refuses_a_spec_larger_than_the_tensor():
    # A V width beyond the tensor's last dimension once made write_kv / fill write past the tensor.
    engine = torch.zeros(4, 2, 16, 1, 32)
    with pytest.raises(attn.Error, match="head_size_v=2048"):
        attn.KVCache.from_dlpack(engine, layout="NHD", head_size_v=2048)
    with pytest.raises(attn.Error, match="head_size_v"):
        attn.KVCache.from_dlpack(engine, layout="NHD", head_size_v=-1)


def _wrapped_layer_cache():
    cfg = attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=64, dtype="bfloat16")
    layer = attn.Attention(cfg)
    engine = torch.zeros(layer.kv_cache_shape(num_blocks=4), dtype=torch.bfloat16)
    cache = attn.KVCache.from_dlpack(engine, layout=layer.kv_cache_layout)
    md = attn.BatchMetadata(context_lens=[0], query_lens=[3], block_ids=[[2]], cache=cache)
    kv = torch.ones(3, 2, 64, dtype=torch.bfloat16)
    return layer, engine, cache, md, kv


@pytest.mark.parametrize("change", ["resize_big", "resize_zero", "set_"])
def test_from_dlpack_refuses_a_tensor_whose_storage_changed(change):
    # resize_ frees the memory in place and set_ swaps it: every use must notice, never touch the old bytes.
    layer, engine, cache, md, kv = _wrapped_layer_cache()
    layer.write_kv(kv, kv, cache, md)  # fine before the change
    if change == "resize_big":
        engine.resize_(50_000_000)
    elif change == "resize_zero":
        engine.resize_(0)
    else:
        engine.set_(torch.zeros(engine.shape, dtype=engine.dtype))
    q = torch.ones(3, 4, 64, dtype=torch.bfloat16)
    for use in (lambda: layer.write_kv(kv, kv, cache, md), lambda: layer.forward(q, cache, md),
                lambda: cache.fill(1.0), lambda: cache.numpy(), lambda: torch.from_dlpack(cache),
                lambda: cache.copy_block(0, 1), lambda: layer.run(layer.plan(md, cache), q, cache, k=kv, v=kv)):
        with pytest.raises(attn.Error, match="resize_ / set_ replaced it"):
            use()


def test_from_dlpack_pins_the_storage_it_wrapped():
    # The wrapper holds the tensor's storage: dropping every Python reference leaves the cache usable.
    layer, engine, cache, md, kv = _wrapped_layer_cache()
    address = engine.data_ptr()
    del engine
    layer.write_kv(kv, kv, cache, md)
    assert cache.numpy().ctypes.data == address and type(cache).__name__ == "_External"
    assert isinstance(cache, attn.KVCache) and not cache.owns_storage


def test_from_views_reads_and_writes_strided_engine_rows_in_place():
    # vLLM's per-token [K | V] rows, head-major blocks: the K and V halves are views, not copies.
    blocks, heads, bs, d = 6, 2, 16, 32
    kv = torch.zeros(blocks, heads, bs, 2 * d, dtype=torch.bfloat16)
    k, v = kv[..., :d].permute(0, 2, 1, 3), kv[..., d:].permute(0, 2, 1, 3)
    cache = attn.KVCache.from_views(k, v)
    assert cache.strided and not cache.owns_storage
    assert (cache.num_blocks, cache.block_size, cache.num_kv_heads, cache.head_size) == (blocks, bs, heads, d)
    layer = attn.Attention(attn.LayerConfig(num_heads=4, num_kv_heads=heads, head_size=d, dtype="bfloat16"))
    md = attn.BatchMetadata(context_lens=[0], query_lens=[3], block_ids=[[4]], cache=cache)
    nk, nv = torch.randn(3, heads, d).bfloat16(), torch.randn(3, heads, d).bfloat16()
    layer.write_kv(nk, nv, cache, md)
    assert torch.equal(kv[4, :, :3, :d], nk.transpose(0, 1)) and torch.equal(kv[4, :, :3, d:], nv.transpose(0, 1))
    assert kv[:4].abs().sum() == 0 and kv[5].abs().sum() == 0
    with pytest.raises(attn.Error, match="strided"):
        cache.numpy()
    kv.resize_(10_000_000)  # the storage moves: the views' memory is gone
    with pytest.raises(attn.Error, match="resize_"):
        layer.write_kv(nk, nv, cache, md)


def test_from_views_refuses_views_it_cannot_address():
    kv = torch.zeros(4, 2, 16, 64)
    k, v = kv[..., :32].permute(0, 2, 1, 3), kv[..., 32:].permute(0, 2, 1, 3)
    with pytest.raises(attn.Error, match="v.strides"):
        attn.KVCache.from_views(k, v.contiguous())
    with pytest.raises(attn.Error, match="k.strides"):
        attn.KVCache.from_views(k.transpose(2, 3), v.transpose(2, 3))
    with pytest.raises(attn.Error, match="v.dtype"):
        attn.KVCache.from_views(k, v.to(torch.bfloat16))
    with pytest.raises(attn.Error, match="k.shape"):
        attn.KVCache.from_views(kv[None], kv[None])
