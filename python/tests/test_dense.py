"""attn.attention: dense (q, k, v) attention through the selector and the paged kernels, against
the fp64 NumPy reference (NumPy arrays) and torch's scaled_dot_product_attention (torch tensors)."""
import numpy as np
import pytest

import attn
from helpers import assert_close, reference_attention
from kv_formats import NUMPY_DTYPES, rounded


def per_sequence(k, lens):
    starts = np.cumsum([0] + list(lens))
    return [k[a:b] for a, b in zip(starts[:-1], starts[1:])]


def reference_bshd(q, k, v, *, causal, scale, window=0, soft_cap=0.0, sinks=None):
    """q [B, Sq, H, D], k/v [B, Skv, Hkv, D] in fp64 → [B, Sq, H, Dv] through the thd reference."""
    b, sq = q.shape[:2]
    skv = k.shape[1]
    out = reference_attention(q.reshape(b * sq, *q.shape[2:]), list(k), list(v), query_lens=[sq] * b,
                              seq_lens=[skv] * b, scale=scale, causal=causal, window=window, soft_cap=soft_cap,
                              sinks=sinks)
    return out.reshape(b, sq, q.shape[2], v.shape[3])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("sq,skv,causal", [(1, 77, True), (33, 33, True), (9, 50, False)])
def test_dense_matches_reference(dtype, layout, sq, skv, causal):
    rng = np.random.default_rng(sq * 100 + skv)
    b, h, hkv, d = 3, 8, 2, 64
    q64, k64, v64 = (rng.standard_normal((b, n, heads, d)) for n, heads in ((sq, h), (skv, hkv), (skv, hkv)))
    q, k, v = (x.astype(NUMPY_DTYPES[dtype]) for x in (q64, k64, v64))
    if layout == "bhsd":
        q, k, v = (np.ascontiguousarray(x.swapaxes(1, 2)) for x in (q, k, v))
    out = attn.dense._attention(q, k, v, causal=causal, layout=layout)
    assert out.dtype == q.dtype and out.shape == q.shape
    got = out.swapaxes(1, 2) if layout == "bhsd" else out
    want = reference_bshd(rounded(q64, dtype), rounded(k64, dtype), rounded(v64, dtype), causal=causal, scale=d ** -0.5)
    assert_close(got, want, dtype, dtype)


def test_dense_window_softcap_sinks_scale_and_thd_varlen():
    rng = np.random.default_rng(11)
    h, hkv, d = 4, 4, 32
    q_lens, kv_lens = [5, 1, 12], [20, 9, 12]
    q = rng.standard_normal((sum(q_lens), h, d)).astype(np.float32)
    k = rng.standard_normal((sum(kv_lens), hkv, d)).astype(np.float32)
    v = rng.standard_normal((sum(kv_lens), hkv, d)).astype(np.float32)
    sinks = rng.standard_normal(h).astype(np.float32)
    cu = lambda lens: np.cumsum([0] + lens)  # noqa: E731
    out = attn.attention(q, k, v, is_causal=True, layout="thd", cu_seqlens_q=cu(q_lens), cu_seqlens_k=cu(kv_lens),
                         scale=0.3, window=7, softcap=5.0, sinks=sinks)
    want = reference_attention(q.astype(np.float64), per_sequence(k.astype(np.float64), kv_lens),
                               per_sequence(v.astype(np.float64), kv_lens), query_lens=q_lens, seq_lens=kv_lens,
                               scale=0.3, window=7, soft_cap=5.0, sinks=sinks.astype(np.float64))
    assert_close(out, want, "float32", "float32")


def test_dense_errors():
    q = np.zeros((1, 4, 3, 32), np.float32)
    with pytest.raises(ValueError, match="layout='bsh' invalid: expected one of bhsd, bshd, thd"):
        attn.attention(q, q, q, layout="bsh")
    with pytest.raises(ValueError, match=r"k.shape=\(4, 3, 32\) invalid: expected 4 dimensions"):
        attn.attention(q, q[0], q)
    with pytest.raises(ValueError, match=r"cu_seqlens_q=\[0, 5\] invalid: expected non-decreasing offsets from 0 to 4"):
        attn.attention(q[0], q[0], q[0], layout="thd", cu_seqlens_q=[0, 5])
    # A float offset is refused, not truncated (3.7 would silently become 3).
    with pytest.raises(TypeError, match=r"cu_seqlens_q=\[0.0, 3.7, 4.0\] invalid: expected integer offsets"):
        attn.attention(q[0], q[0], q[0], layout="thd", cu_seqlens_q=np.array([0, 3.7, 4]))
    with pytest.raises(attn.Error, match="scale=0.0 invalid"):
        attn.attention(q, q, q, scale=0.0)


def test_dense_torch_matches_scaled_dot_product_attention():
    torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(0)
    for dtype, (atol, rtol) in ((torch.float32, (2e-5, 2e-5)), (torch.bfloat16, (1.2e-2, 1.2e-2))):
        for sq, skv, causal in ((40, 40, True), (1, 300, False)):
            q = torch.randn(2, 8, sq, 128, generator=gen).to(dtype)
            k = torch.randn(2, 2, skv, 128, generator=gen).to(dtype)
            v = torch.randn(2, 2, skv, 128, generator=gen).to(dtype)
            out = attn.attention(q, k, v, is_causal=causal, enable_gqa=True)
            assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == q.shape
            # torch in float64 from the same rounded inputs: the reference.
            want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=True)
            torch.testing.assert_close(out.double(), want, atol=atol, rtol=rtol)


def test_sdpa_drop_in_matches_scaled_dot_product_attention_in_fp64():
    """attn.attention with SDPA's own arguments, parametrised from SDPA's signature, in float64."""
    torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")
    import inspect
    import re
    F = torch.nn.functional
    # SDPA is a builtin: its signature is the first line of its docstring.
    doc = re.search(r"scaled_dot_product_attention\((.*?)\)", F.scaled_dot_product_attention.__doc__, re.S).group(1)
    sdpa = [(a.split("=")[0].strip(), a.split("=")[1].strip() if "=" in a else None) for a in doc.split(",")]
    ours = inspect.signature(attn.attention).parameters
    assert list(ours)[: len(sdpa)] == [name for name, _ in sdpa]  # same names, same order
    for name, default in sdpa:
        if default is not None:
            assert repr(ours[name].default) == default, name
    gen = torch.Generator().manual_seed(5)
    for b, hq, hkv, sq, skv in ((2, 8, 2, 9, 9), (1, 4, 4, 1, 37), (2, 6, 3, 12, 5)):
        q = torch.randn(b, hq, sq, 32, generator=gen, dtype=torch.float64)
        k = torch.randn(b, hkv, skv, 32, generator=gen, dtype=torch.float64)
        v = torch.randn(b, hkv, skv, 32, generator=gen, dtype=torch.float64)
        bool_mask = torch.rand(b, 1, sq, skv, generator=gen) > 0.3
        bool_mask[..., 0] = True
        float_mask = torch.randn(b, hq, sq, skv, generator=gen, dtype=torch.float64)
        for kw in (dict(), dict(is_causal=True), dict(scale=0.2), dict(attn_mask=bool_mask), dict(attn_mask=float_mask)):
            gqa = dict(enable_gqa=True) if hq != hkv else {}
            want = F.scaled_dot_product_attention(q, k, v, **kw, **gqa)
            # attn's kernels take float32 at most: the same values, rounded once.
            ours = {a: (x.float() if torch.is_tensor(x) and x.is_floating_point() else x) for a, x in kw.items()}
            got = attn.attention(q.float(), k.float(), v.float(), **ours, **gqa)
            torch.testing.assert_close(got.double(), want, atol=3e-6, rtol=3e-6)


def test_sdpa_drop_in_errors_name_the_argument():
    torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")
    q, k = torch.zeros(1, 8, 4, 32), torch.zeros(1, 2, 4, 32)
    with pytest.raises(ValueError, match="key heads=2 invalid: expected query's 8 heads, or enable_gqa=True"):
        attn.attention(q, k, k)
    with pytest.raises(ValueError, match="dropout_p=0.1 invalid"):
        attn.attention(q, q, q, dropout_p=0.1)
    with pytest.raises(TypeError):
        attn.attention(q, q, q, causal=True)  # SDPA spells it is_causal
    with pytest.raises(ValueError, match="attn_mask invalid here"):
        attn.attention(q.numpy(), q.numpy(), q.numpy(), attn_mask=np.ones((4, 4), bool))
    meta = torch.zeros(1, 8, 4, 32, device="meta")  # a tensor off the CPU (no GPU needed to make one)
    with pytest.raises(ValueError, match="key.device=meta invalid: expected cpu"):
        attn.attention(q, meta, q)


def test_sdpa_drop_in_never_detaches_gradients():
    torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")
    q = torch.randn(1, 2, 5, 16, requires_grad=True)
    out = attn.attention(q, q, q, is_causal=True)
    assert out.requires_grad
    out.sum().backward()
    assert q.grad is not None


def test_dense_reads_key_value_in_place(monkeypatch):
    # Dense K / V are the cache (one block per sequence at the tensors' strides), not copied into one.
    torch = pytest.importorskip("torch")
    import attn.dense as dense

    views = []
    real = dense._dense_view
    monkeypatch.setattr(dense, "_dense_view", lambda *a: views.append(real(*a)) or views[-1])
    g = torch.Generator().manual_seed(11)
    q = torch.randn(3, 8, 1, 64, generator=g).bfloat16()
    k, v = (torch.randn(3, 2, 301, 64, generator=g).bfloat16() for _ in range(2))
    for layout, args in (("bhsd", (q, k, v)), ("bshd", tuple(x.transpose(1, 2) for x in (q, k, v)))):
        out = attn.attention(*args, enable_gqa=True, layout=layout)
        assert views[-1] is not None and views[-1].strided, layout
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        got = out if layout == "bhsd" else out.transpose(1, 2)
        torch.testing.assert_close(got.float(), ref, atol=2e-2, rtol=2e-2)
    # K and V at different strides cannot share one view: one copy, same answer.
    v_columns = v.transpose(2, 3).contiguous().transpose(2, 3)  # rows no longer contiguous
    out = attn.attention(q, k, v_columns, enable_gqa=True)
    assert views[-1] is None
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
