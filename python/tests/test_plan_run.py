"""plan once per step, run per layer: one plan serves every layer of a config (each with its own
cache and weights) and gives what forward gives; MLA's expanded form from constructor weights;
top-k indices through run / forward; bad plans, forms and workspaces are refused clearly."""
import ml_dtypes
import numpy as np
import pytest

import attn
from helpers import filled_step, valid_cpu_backends

CFG = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16")
CONTEXT, QUERY = [40, 0, 130, 7], [1, 19, 1, 5]


def shared_table_batches(n, backend=None):
    """n layers of one config with their own caches, activations and softmax scales."""
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        b = filled_step(attn.Attention(CFG, backend, scale=0.1 + 0.05 * i), rng, CONTEXT, QUERY)
        b.q = rng.standard_normal((b.md.num_tokens, 8, 64)).astype(ml_dtypes.bfloat16)
        out.append(b)
    return out


def test_plan_is_printable_and_sized():
    b = shared_table_batches(1)[0]
    plan = b.layer.plan(b.md, b.cache)
    assert isinstance(plan, attn.StepPlan)
    assert plan.backend == b.layer.backend
    assert plan.config == CFG
    assert plan.metadata.num_tokens == b.md.num_tokens
    assert repr(plan).startswith(f"{b.layer.backend} plan: ")
    assert f"workspace {plan.workspace_bytes} bytes" in repr(plan)
    assert plan.preferred_mla_form == "absorbed"


@pytest.mark.parametrize("backend", valid_cpu_backends(CFG))
def test_one_plan_serves_every_layer_like_forward(backend):
    batches = shared_table_batches(3, backend)
    want = [b.layer.forward(b.q, b.cache, b.md) for b in batches]
    assert not np.array_equal(want[0], want[1])
    plan = batches[0].layer.plan(batches[0].md, batches[0].cache)
    ws = attn.Workspace(plan.workspace_bytes)
    assert ws.nbytes >= plan.workspace_bytes
    for b, w in zip(reversed(batches), reversed(want)):
        np.testing.assert_array_equal(b.layer.run(plan, b.q, b.cache, workspace=ws), w)
        out = np.empty_like(w)
        assert b.layer.run(plan, b.q, b.cache, out) is out
        np.testing.assert_array_equal(out, w)


@pytest.mark.parametrize("backend", valid_cpu_backends(CFG))
def test_step_plans_plan_each_layer_group_once(backend):
    batches = shared_table_batches(3, backend)
    want = [b.layer.forward(b.q, b.cache, b.md) for b in batches]
    plans = attn.StepPlans(batches[0].md)
    first = plans.for_layer(batches[0].layer, batches[0].cache)
    ws = attn.Workspace(plans.workspace_bytes)
    for b, w in zip(batches, want):
        plan = plans.for_layer(b.layer, b.cache)
        assert plan.backend == backend and plan.config == CFG
        np.testing.assert_array_equal(b.layer.run(plan, b.q, b.cache, workspace=ws), w)
    assert len(plans) == 1 and plans.workspace_bytes == first.workspace_bytes
    windowed = attn.Attention(attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16",
                                               sliding_window=16), backend)
    assert plans.for_layer(windowed, batches[0].cache).config == windowed.config
    assert len(plans) == 2 and repr(plans) == "StepPlans(2 plans)"


def test_run_writes_new_kv_before_attending():
    rng = np.random.default_rng(9)
    a = attn.Attention(CFG)
    b = attn.Attention(CFG)
    ca, cb = a.make_cache(8), b.make_cache(8)
    md = attn.BatchMetadata(context_lens=[0, 0], query_lens=[12, 3], block_ids=[[0], [5]], cache=ca)
    k = rng.standard_normal((15, 2, 64)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((15, 2, 64)).astype(ml_dtypes.bfloat16)
    q = rng.standard_normal((15, 8, 64)).astype(ml_dtypes.bfloat16)
    a.write_kv(k, v, ca, md)
    want = a.forward(q, ca, md)
    got = b.run(b.plan(md, cb), q, cb, k=k, v=v)  # write + attend in one call
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(cb.numpy(), ca.numpy())
    with pytest.raises(attn.Error, match="v=None"):
        b.run(b.plan(md, cb), q, cb, k=k)


def test_plans_of_another_config_or_cache_geometry_are_refused():
    b = shared_table_batches(1)[0]
    plan = b.layer.plan(b.md, b.cache)
    other = attn.Attention(CFG.replace(num_kv_heads=4))
    other_cache = other.make_cache(b.cache.num_blocks)
    with pytest.raises(attn.Error, match="plan.config=.*plans are shared only by equal configs"):
        other.run(plan, np.zeros((b.md.num_tokens, 8, 64), ml_dtypes.bfloat16), other_cache)
    bigger = b.layer.make_cache(b.cache.num_blocks + 4)
    with pytest.raises(attn.Error, match="the geometry the plan was made for"):
        b.layer.run(plan, b.q, bigger)
    with pytest.raises(attn.Error, match="Invalid mla_form: 'folded'. Valid values are: absorbed, expanded"):
        b.layer.run(plan, b.q, b.cache, mla_form="folded")


def test_a_workspace_serves_one_run_at_a_time():
    ws = attn.Workspace()
    assert ws.nbytes == 0 and repr(ws) == "Workspace(0 bytes)"
    ws.reserve(1000)
    assert ws.nbytes >= 1000
    # Sizes near 2^64 used to wrap to a 0-byte workspace in the page rounding.
    with pytest.raises(attn.Error, match="workspace bytes=16.0 EiB invalid: expected at most"):
        attn.Workspace(2**64 - 1)
    with pytest.raises(attn.Error, match="workspace bytes="):
        ws.reserve(2**64 - 2)
    b = shared_table_batches(1)[0]
    plan = b.layer.plan(b.md, b.cache)
    np.testing.assert_array_equal(b.layer.run(plan, b.q, b.cache, workspace=ws), b.layer.forward(b.q, b.cache, b.md))
    assert ws.nbytes >= plan.workspace_bytes  # grown to what the plan needs


# --- MLA: the expanded form from constructor weights, and top-k sparse layers ---

RANK, ROPE, NOPE, VDIM, HEADS = 32, 16, 24, 20, 4
MLA = dict(num_heads=HEADS, num_kv_heads=1, head_size=RANK + ROPE, kv_lora_rank=RANK, qk_rope_head_dim=ROPE,
           qk_nope_head_dim=NOPE, v_head_dim=VDIM, use_mla=True, dtype="float32")


def test_mla_expanded_form_equals_absorbed_with_the_same_weights():
    rng = np.random.default_rng(21)
    w_uk = rng.standard_normal((HEADS, RANK, NOPE)).astype(np.float32) / np.sqrt(NOPE)
    w_uv = rng.standard_normal((HEADS, RANK, VDIM)).astype(np.float32) / np.sqrt(RANK)
    layer = attn.Attention(attn.LayerConfig(**MLA), w_uk=w_uk, w_uv=w_uv)
    b = filled_step(layer, rng, [30, 0, 70], [1, 40, 2])
    cache, md = b.cache, b.md
    plan = layer.plan(md, cache)
    assert plan.preferred_mla_form in ("absorbed", "expanded")
    q_exp = rng.standard_normal((md.num_tokens, HEADS, NOPE + ROPE)).astype(np.float32)
    expanded = layer.run(plan, q_exp, cache, mla_form="expanded")
    assert expanded.shape == (md.num_tokens, HEADS, VDIM)
    # Absorbed: q_latent[h] = W_UK[h] · q_nope[h]; out = latent output · W_UV[h].
    q_abs = np.concatenate([np.einsum("hrn,thn->thr", w_uk, q_exp[..., :NOPE]), q_exp[..., NOPE:]], axis=-1)
    latent = layer.run(plan, q_abs.astype(np.float32), cache)
    assert latent.shape == (md.num_tokens, HEADS, RANK)
    np.testing.assert_allclose(expanded, np.einsum("thr,hrv->thv", latent, w_uv), rtol=2e-4, atol=2e-4)


def test_mla_weights_are_checked_and_needed_for_the_expanded_form():
    with pytest.raises(attn.Error, match=r"w_uk.shape=\(4, 32, 5\) invalid"):
        attn.Attention(attn.LayerConfig(**MLA), w_uk=np.zeros((4, 32, 5)), w_uv=np.zeros((HEADS, RANK, VDIM)))
    with pytest.raises(attn.Error, match="w_uk and w_uv together"):
        attn.Attention(attn.LayerConfig(**MLA), w_uk=np.zeros((HEADS, RANK, NOPE)))
    layer = attn.Attention(attn.LayerConfig(**MLA))
    b = filled_step(layer, np.random.default_rng(1), [5], [1])
    cache, md = b.cache, b.md
    with pytest.raises(attn.Error, match="mla_form=expanded invalid"):
        layer.run(layer.plan(md, cache), np.zeros((1, HEADS, NOPE + ROPE), np.float32), cache, mla_form="expanded")


def test_topk_sparse_layer_listing_every_position_equals_dense():
    rng = np.random.default_rng(31)
    topk = 128
    sparse = attn.Attention(attn.LayerConfig(**MLA, use_sparse=True, index_topk=topk))
    dense = attn.Attention(attn.LayerConfig(**MLA), "cpu_mla")
    assert sparse.backend == "cpu_sparse"
    b = filled_step(sparse, rng, [50, 0, 90], [1, 20, 1])
    cache, md = b.cache, b.md
    q = rng.standard_normal((md.num_tokens, HEADS, RANK + ROPE)).astype(np.float32)
    idx = np.full((md.num_tokens, topk), -1, np.int32)
    t = 0
    for s in seq_tokens(md):
        idx[t, :s] = rng.permutation(s)  # every position (later ones are skipped: causal)
        t += 1
    want = dense.forward(q, cache, md)
    np.testing.assert_allclose(sparse.forward(q, cache, md, topk_indices=idx), want, rtol=1e-5, atol=1e-5)
    plan = sparse.plan(md, cache)
    np.testing.assert_allclose(sparse.run(plan, q, cache, topk_indices=idx), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(attn.Error, match="topk_indices=unset"):
        sparse.run(plan, q, cache)
    with pytest.raises(TypeError, match="topk_indices=.*int32"):
        sparse.run(plan, q, cache, topk_indices=idx.astype(np.int64))


def seq_tokens(md):
    """Per query token: the length of its sequence."""
    out = []
    qsl, lens = md.query_start_loc, md.seq_lens
    for s in range(md.num_seqs):
        out += [int(lens[s])] * int(qsl[s + 1] - qsl[s])
    return out
