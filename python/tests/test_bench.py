"""python/examples/bench_plot.py sets each case up as `attn bench` does: the cache its backend asks for,
blocks scattered by one rule, disjoint instances spanning the pool, every page first touched, and a
timed step (plan + run) that computes what forward computes. No timings are checked."""
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

import attn
from helpers import valid_cpu_backends

# The plot script is an example, not part of the package: loaded from its file.
_spec = importlib.util.spec_from_file_location("bench_plot", Path(__file__).parents[1] / "examples" / "bench_plot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

CFG = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16")
POOL = 1 << 20  # small: several instances, a fast set-up


def make_case(backend, batch=3, context=150, query=1):
    return bench.Case(CFG, backend, batch, context, query, np.random.default_rng(0), POOL, threads=2)


@pytest.mark.parametrize("backend", valid_cpu_backends(CFG))
def test_cache_is_the_one_the_backend_asks_for(backend):
    case = make_case(backend)
    layer, cache = case.layer, case.cache
    assert cache.layout == layer.kv_cache_layout
    assert cache.dtype == layer.kv_cache_dtype
    assert cache.block_size == layer.block_size
    assert cache.shape == layer.kv_cache_shape(cache.num_blocks)


# cpu_flash's own cache layout here: pairs where its pair kernels run (AVX-512 BF16, unless
# ATTN_CPU_ISA forces a lower build), else HND rows.
FLASH_LAYOUT = attn.Attention(CFG, "cpu_flash").kv_cache_layout


def test_cpu_flash_reads_its_own_layout():
    # The bench must build the cache cpu_flash makes for itself, not a hand-built layout.
    assert make_case("cpu_flash").cache.layout == FLASH_LAYOUT
    pairs_here = attn.platform().has("avx512_bf16") and os.environ.get("ATTN_CPU_ISA", "auto") in ("", "auto", "amx")
    assert FLASH_LAYOUT == ("HND_PAIRS" if pairs_here else "HND")


def test_block_ids_are_one_permutation_dealt_out():
    ids = np.array(bench.shuffled_block_ids(np.random.default_rng(1), 4, 3, 5))
    assert ids.shape == (4, 3, 5)
    assert sorted(ids.ravel().tolist()) == list(range(60))  # every block once: instances are disjoint
    assert not all(np.all(np.diff(row) == 1) for row in ids.reshape(12, 5))  # scattered, not in order


def test_instances_span_the_pool_and_use_the_dealt_blocks():
    case = make_case("cpu_flash", batch=2, context=200)
    bs = case.layer.block_size
    per_seq = -(-201 // bs)
    per_instance = case.row_bytes * bs * per_seq * 2
    assert case.instances == max(2, -(-POOL // per_instance))  # the fewest that span the pool, at least two
    assert case.cache.num_blocks == case.instances * 2 * per_seq
    for ids, md in zip(case.block_ids, case.metadata):
        assert md.block_table.tolist() == ids
    assert case.kv_bytes == 2 * 201 * case.row_bytes  # each sequence's KV read once per call


def test_first_touch_writes_every_byte():
    layer = attn.Attention(CFG, "cpu_flash")
    cache = layer.make_cache(37)  # not a whole number of chunks per thread
    cache.fill(1.0)
    bench.first_touch(cache, 3)
    assert not cache.numpy().view(np.uint16).any()


@pytest.mark.parametrize("backend", valid_cpu_backends(CFG))
def test_timed_step_computes_what_forward_computes(backend):
    case = make_case(backend)
    rng = np.random.default_rng(2)
    case.cache.numpy()[...] = rng.standard_normal(case.cache.shape).astype(case.cache.numpy().dtype)
    for i in range(case.instances + 1):  # call i reads instance i mod instances
        case.step(i)
        want = case.layer.forward(case.q, case.cache, case.metadata[i % case.instances])
        np.testing.assert_array_equal(case.out.view(np.uint16), want.view(np.uint16))


def test_result_keeps_its_keys():
    r = bench.run_case(CFG, "cpu_flash", 2, 100, 1, np.random.default_rng(0), 1, POOL, threads=1)
    assert {"backend", "variant", "batch", "context", "query", "ms", "kv_bytes", "gbps", "instances"} <= r.keys()
    assert r["kv_layout"] == FLASH_LAYOUT and r["kv_bytes"] == 2 * 101 * 2 * 128 * 2
