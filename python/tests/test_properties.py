"""Hypothesis: random valid layer configs and ragged batches, each run on the backend the
selector picks, against the fp64 reference. Bounded example count; the seed is in each report."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attn
from helpers import assert_close, make_batch


@st.composite
def layer_and_batch(draw):
    num_kv_heads = draw(st.sampled_from([1, 2, 3]))
    group = draw(st.sampled_from([1, 2, 4]))
    cfg = attn.LayerConfig(
        num_heads=num_kv_heads * group,
        num_kv_heads=num_kv_heads,
        head_size=draw(st.sampled_from([32, 40, 64, 128])),
        dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
        kv_cache_dtype=draw(st.sampled_from(["auto", "auto", "fp8_e4m3"])),
        block_size=draw(st.sampled_from([0, 1, 8, 16, 32])),
        sliding_window=draw(st.sampled_from([0, 0, 1, 7, 33])),
        logits_soft_cap=draw(st.sampled_from([0.0, 0.0, 2.5])),
        has_sink=draw(st.booleans()),
        use_non_causal=draw(st.booleans()),
    )
    n = draw(st.integers(1, 4))
    context = draw(st.lists(st.integers(0, 80), min_size=n, max_size=n))
    query = draw(st.lists(st.integers(1, 24), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**32 - 1))
    return cfg, context, query, seed


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer_and_batch())
def test_selected_backend_matches_reference(case):
    cfg, context, query, seed = case
    rng = np.random.default_rng(seed)
    sinks = rng.standard_normal(cfg.num_heads).astype(np.float32) if cfg.has_sink else None
    layer = attn.Attention(cfg, sinks=sinks)
    b = make_batch(rng, layer, context, query, kv_scale=0.05 if cfg.kv_cache_dtype != "auto" else None)
    out = layer.forward(b.q, b.cache, b.md)
    want = b.reference(causal=cfg.causal, window=cfg.sliding_window, soft_cap=cfg.logits_soft_cap,
                       sinks=None if sinks is None else sinks.astype(np.float64))
    assert_close(out, want, cfg.dtype, b.cache.dtype, f"{layer.backend} seed={seed} context={context} query={query}")
