"""attn's vLLM backend called as vLLM's CPU model runner calls it (metadata builder, then each
layer's forward on vLLM's own cache tensor), against an fp32 torch reference over the same
canonical [K | V] content: the features vLLM's CPU runner sends (windows, soft-cap, sinks, ALiBi,
fp8 with the layer's scales, both cache layouts, prefix-cached blocks, KV sharing, non-causal
steps), in both ways attn reads the cache (vLLM's canonical content; attn's pairs blocks, filled
from canonical content the way vLLM's KV transfer fills them: CpuPlatform.pack_kv_cache), and
malformed engine metadata ending in attn's named errors."""
from __future__ import annotations

import math

import pytest
import torch

import attn
from attn.integrations import vllm_backend as vb
from vllm.config import set_current_vllm_config
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheLayout

from tests.v1.attention.utils import create_vllm_config

H, HKV, D, BS, NUM_BLOCKS = 8, 2, 64, 16, 64


class Layer:
    def __init__(self, k_scale=1.0, v_scale=1.0):
        self._k_scale_float, self._v_scale_float = k_scale, v_scale
        self._k_scale, self._v_scale = torch.tensor(k_scale), torch.tensor(v_scale)


@pytest.fixture(scope="module", autouse=True)
def plugin():
    from attn.integrations import vllm as attn_vllm

    assert attn_vllm.register()


@pytest.fixture(params=["canonical", "pairs"])
def mode(request, monkeypatch):
    monkeypatch.setenv("ATTN_VLLM_KV_LAYOUT", request.param)
    return request.param


@pytest.fixture(scope="module")
def vllm_config():
    return create_vllm_config(model_name="meta-llama/Meta-Llama-3-8B", max_model_len=1024, block_size=BS,
                              num_gpu_blocks=NUM_BLOCKS, dtype="bfloat16")


def _cache(layout: KVCacheLayout, dtype) -> torch.Tensor:
    """vLLM's per-layer cache: logical [blocks, kv heads, block_size, 2 * D] in `layout`."""
    logical = (1, NUM_BLOCKS, HKV, BS, 2 * D)
    physical = torch.zeros(tuple(logical[i] for i in layout.stride_order), dtype=dtype)
    return physical.permute(*[layout.stride_order.index(i) for i in range(5)])[0]


def _metadata(seq_lens, query_lens, block_table, causal=True, slots=None) -> CommonAttentionMetadata:
    qsl = torch.tensor([0] + list(torch.tensor(query_lens).cumsum(0).tolist()), dtype=torch.int32)
    if slots is None:
        slots = []
        for s, (n, q) in enumerate(zip(seq_lens, query_lens)):
            slots += [int(block_table[s][p // BS]) * BS + p % BS for p in range(n - q, n)]
    width = max(len(r) for r in block_table)
    table = torch.tensor([list(r) + [0] * (width - len(r)) for r in block_table], dtype=torch.int32)
    return CommonAttentionMetadata(query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
                                   num_reqs=len(seq_lens), num_actual_tokens=sum(query_lens), max_query_len=max(query_lens),
                                   max_seq_len=max(seq_lens), block_table_tensor=table,
                                   slot_mapping=torch.tensor(slots, dtype=torch.int64), causal=causal)


def _reference(q, keys, values, seq_lens, query_lens, *, scale, window=None, softcap=None, sinks=None, alibi=None,
               causal=True):
    """fp32 attention per sequence: q [T, H, D]; keys / values per sequence [len, HKV, D]."""
    out, t0 = [], 0
    for s, (n, ql) in enumerate(zip(seq_lens, query_lens)):
        qs = q[t0:t0 + ql].float().transpose(0, 1)                        # [H, ql, D]
        k = keys[s].float().repeat_interleave(H // HKV, 1).transpose(0, 1)  # [H, n, D]
        v = values[s].float().repeat_interleave(H // HKV, 1).transpose(0, 1)
        logits = qs @ k.transpose(1, 2) * scale
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        qpos = torch.arange(n - ql, n)[:, None]
        kpos = torch.arange(n)[None, :]
        if alibi is not None:
            logits = logits + torch.tensor(alibi)[:, None, None] * (kpos - qpos)[None].float()
        mask = torch.ones(ql, n, dtype=torch.bool)
        if causal:
            mask &= kpos <= qpos
        if window:
            mask &= qpos - kpos < window
        logits = logits.masked_fill(~mask, -math.inf)
        if sinks is not None:
            logits = torch.cat([logits, torch.tensor(sinks)[:, None, None].expand(H, ql, 1)], -1)
        p = torch.softmax(logits, -1)[..., :n]
        out.append((p @ v).transpose(0, 1))
        t0 += ql
    return torch.cat(out)


def _run(vllm_config, *, layout=KVCacheLayout.LBHNC, kv_cache_dtype="auto", window=None, softcap=None, sinks=None,
         alibi=None, causal=True, k_scale=1.0, v_scale=1.0, seq_lens=(40, 17, 70), query_lens=(1, 17, 5), seed=0):
    """Pre-populates the context in vLLM's canonical content, runs one step (new K/V written by the
    forward), returns (attn's output, the reference, the cache tensor)."""
    g = torch.Generator().manual_seed(seed)
    blocks = torch.randperm(NUM_BLOCKS - 1, generator=g) + 1
    table, used = [], 0
    for n in seq_lens:
        nb = math.ceil(n / BS)
        table.append(blocks[used:used + nb].tolist())
        used += nb
    dtype = torch.bfloat16
    fp8 = kv_cache_dtype != "auto"
    kv = _cache(layout, torch.uint8 if fp8 else dtype)  # vLLM allocates fp8 caches as bytes
    keys = [torch.randn(n, HKV, D, generator=g).to(dtype) for n in seq_lens]
    values = [torch.randn(n, HKV, D, generator=g).to(dtype) for n in seq_lens]
    store = kv.view(torch.float8_e4m3fn) if fp8 else kv
    for s, n in enumerate(seq_lens):  # the context, as vLLM's tests and its KV transfer leave it
        for p in range(n - query_lens[s]):
            b, o = table[s][p // BS], p % BS
            store[b, :, o, :D] = (keys[s][p].float() / k_scale).to(store.dtype)
            store[b, :, o, D:] = (values[s][p].float() / v_scale).to(store.dtype)
    from vllm.platforms.cpu import CpuPlatform

    CpuPlatform.pack_kv_cache(kv, torch.tensor(blocks[:used].tolist()))  # as after a KV transfer
    if fp8:  # the reference sees what the cache holds
        keys = [(k.float() / k_scale).to(torch.float8_e4m3fn).float() * k_scale for k in keys]
        values = [(v.float() / v_scale).to(torch.float8_e4m3fn).float() * v_scale for v in values]
    q = torch.randn(sum(query_lens), H, D, generator=g).to(dtype)
    new_k = torch.cat([k[n - ql:] for k, n, ql in zip(keys, seq_lens, query_lens)]).to(dtype)
    new_v = torch.cat([v[n - ql:] for v, n, ql in zip(values, seq_lens, query_lens)]).to(dtype)
    scale = D ** -0.5
    with set_current_vllm_config(vllm_config):
        impl = vb.AttnImpl(H, D, scale, HKV, alibi, window, kv_cache_dtype, softcap,
                           sinks=None if sinks is None else torch.tensor(sinks))
        assert impl.backend is not None, impl.why
        builder = vb.AttnMetadataBuilder(None, ["layer"], vllm_config, torch.device("cpu"))
        md = builder.build(0, _metadata(seq_lens, query_lens, table, causal))
        out = torch.full((sum(query_lens), H * D), float("nan"), dtype=dtype)
        impl.forward(Layer(k_scale, v_scale), q, new_k, new_v, kv, md, out)
    ref = _reference(q, keys, values, seq_lens, query_lens, scale=scale, window=window, softcap=softcap, sinks=sinks,
                     alibi=alibi, causal=causal)
    return out.view(-1, H, D).float(), ref, kv, table


FEATURES = {
    "plain": {},
    "window": {"window": 9},
    "softcap": {"softcap": 5.0},
    "sinks": {"sinks": [0.5 * h - 1.0 for h in range(H)]},
    "alibi": {"alibi": [2.0 ** (-(h + 1)) for h in range(H)]},
    "token_major_layout": {"layout": KVCacheLayout.LBNHC},
    "non_causal": {"causal": False, "query_lens": (1, 17, 70)},
    "fp8": {"kv_cache_dtype": "fp8", "k_scale": 0.5, "v_scale": 0.25},
}


@pytest.mark.parametrize("feature", list(FEATURES))
def test_forward_matches_reference(vllm_config, feature, mode):
    out, ref, _, _ = _run(vllm_config, **FEATURES[feature])
    assert torch.isfinite(out).all()
    tol = 6e-2 if feature == "fp8" else 2e-2
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)


def test_new_tokens_land_in_canonical_content(vllm_config, monkeypatch):
    monkeypatch.setenv("ATTN_VLLM_KV_LAYOUT", "canonical")
    # After the step the cache holds each new token's [K | V] row where vLLM's slot mapping says.
    seq_lens, query_lens = (40, 17), (3, 17)
    out, ref, kv, table = _run(vllm_config, seq_lens=seq_lens, query_lens=query_lens, seed=3)
    g = torch.Generator().manual_seed(3)
    torch.randperm(NUM_BLOCKS - 1, generator=g)
    keys = [torch.randn(n, HKV, D, generator=g).to(torch.bfloat16) for n in seq_lens]
    values = [torch.randn(n, HKV, D, generator=g).to(torch.bfloat16) for n in seq_lens]
    for s, n in enumerate(seq_lens):
        for p in range(n - query_lens[s], n):
            b, o = table[s][p // BS], p % BS
            assert torch.equal(kv[b, :, o, :D], keys[s][p]) and torch.equal(kv[b, :, o, D:], values[s][p])


def test_malformed_engine_metadata_named_errors(vllm_config, mode):
    dtype = torch.bfloat16
    kv = _cache(KVCacheLayout.LBHNC, dtype)
    with set_current_vllm_config(vllm_config):
        impl = vb.AttnImpl(H, D, D ** -0.5, HKV, None, None, "auto")
        builder = vb.AttnMetadataBuilder(None, ["layer"], vllm_config, torch.device("cpu"))
    q, k, v = (torch.zeros(2, n, D, dtype=dtype) for n in (H, HKV, HKV))
    out = torch.empty(2, H * D, dtype=dtype)
    short = _metadata([40, 2], [1, 1], [[1, 2, 3], [4]])
    short.block_table_tensor = short.block_table_tensor[:, :2]  # 40 tokens need 3 blocks
    with pytest.raises(attn.Error, match="block"):
        impl.forward(Layer(), q, k, v, kv, builder.build(0, short), out)
    wrong_slot = _metadata([40, 2], [1, 1], [[1, 2, 3], [4]], slots=[3 * BS + 9, 4 * BS + 1])  # token 0 sits at offset 7
    with pytest.raises(attn.Error, match=r"slot_mapping\[0\]"):
        impl.forward(Layer(), q, k, v, kv, builder.build(0, wrong_slot), out)
    out_of_range = _metadata([40, 2], [1, 1], [[1, 2, NUM_BLOCKS + 5], [4]])
    with pytest.raises(attn.Error, match="block"):
        impl.forward(Layer(), q, k, v, kv, builder.build(0, out_of_range), out)


def test_kv_transfer_packing(vllm_config, monkeypatch):
    # vLLM's KV transfer packs received blocks for CPU_ATTN's private layout; for attn's caches the
    # canonical content stays as it is, or becomes attn's pairs blocks (which _run's forward reads).
    from vllm.platforms.cpu import CpuPlatform

    monkeypatch.setenv("ATTN_VLLM_KV_LAYOUT", "canonical")
    _, _, kv, _ = _run(vllm_config, seed=5)
    before = kv.clone()
    CpuPlatform.pack_kv_cache(kv, torch.tensor([1, 2, 3]))
    assert torch.equal(kv, before)
    monkeypatch.setenv("ATTN_VLLM_KV_LAYOUT", "pairs")
    canon = torch.randn(NUM_BLOCKS, HKV, BS, 2 * D).bfloat16()
    kv = canon.clone()
    CpuPlatform.pack_kv_cache(kv, torch.tensor([2, 5]))
    pairs = vb.pairs_view(kv)
    if vb._writer(HKV, D).kv_cache_layout != "HND_PAIRS":
        # attn's kernels read rows on this CPU (no AVX-512 BF16), as its forward does: the arrived
        # blocks keep vLLM's canonical content.
        assert pairs is None and torch.equal(kv, canon)
        return
    assert torch.equal(kv[3], canon[3]) and not torch.equal(kv[2], canon[2])  # only the arrived blocks change
    cache = attn.KVCache.from_dlpack(pairs, layout="HND_PAIRS")
    md = attn.BatchMetadata(context_lens=[0], query_lens=[BS], block_ids=[[5]], cache=cache)
    # K of head 1, token 3, dims 0 / 1 of block 5: the pair order puts dims 2i, 2i+1 of a token together.
    k = pairs[5, 0, 1].reshape(D // 2, BS, 2)
    assert torch.equal(k[0, 3], canon[5, 1, 3, :2]) and torch.equal(k[1, 3], canon[5, 1, 3, 2:4])
    assert md.num_tokens == BS


def test_declared_capabilities_follow_attn_selector():
    assert torch.bfloat16 in vb.AttnBackend.supported_dtypes
    assert "fp8" in vb.AttnBackend.supported_kv_cache_dtypes
    sizes = vb.AttnBackend.get_supported_head_sizes()
    assert 64 in sizes and 128 in sizes
    for d in sizes:
        cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=d, dtype="bfloat16")
        assert attn.select(cfg).backend != "reference"
    assert vb.AttnBackend.supported_kv_cache_layouts()[0] == KVCacheLayout.LBHNC


def test_register_reaches_engines_built_after_an_earlier_selection(vllm_config):
    """An engine built before register() (vLLM's CPU_ATTN) leaves its choice in vLLM's per-process
    selection cache; engines built after register() in the same process must get attn's backend."""
    from attn.integrations import vllm as attn_vllm
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    def chosen():
        with set_current_vllm_config(vllm_config):
            return selector.get_attn_backend(D, torch.bfloat16, "auto")

    AttentionBackendEnum.CPU_ATTN.clear_override()  # as before the plugin registered
    selector._cached_get_attn_backend.cache_clear()
    try:
        assert chosen() is CPUAttentionBackend      # the earlier engine's choice, now cached
        assert attn_vllm.register()
        assert chosen() is vb.AttnBackend
    finally:
        attn_vllm.register()
