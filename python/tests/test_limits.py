"""Sizes beyond attn's limits raise attn.Error naming the argument, the value and the limit:
each test is a reproducer that used to crash, read or write out of bounds, or report a wrapped size."""
import pytest

import attn


def test_huge_cache_is_refused_instead_of_allocating_zero_bytes():
    # The byte count once wrapped to 0, nbytes said 0, and write_kv then wrote outside the cache.
    with pytest.raises(attn.Error, match=r"num_blocks=1073741824 .*<= 16777216"):
        attn.KVCache(2**30, block_size=2**28, num_kv_heads=1, head_size=32, dtype="float32")
    with pytest.raises(attn.Error, match=r"block_size=268435456 .*<= 65536"):
        attn.KVCache(4, block_size=2**28, num_kv_heads=1, head_size=32, dtype="float32")


def test_cache_bytes_match_the_spec():
    cache = attn.KVCache(4, block_size=16, num_kv_heads=2, head_size=64, dtype="float32")
    assert cache.nbytes == 4 * 2 * 16 * 2 * 64 * 4


def test_lengths_whose_sum_wraps_are_refused():
    # The sum once went negative, needed no blocks, and the block table read past block_ids.
    with pytest.raises(attn.Error, match=r"context_len \+ query_len=4611686018427387904 \+ 4611686018427387904 \(beyond 64 bits\)"):
        attn.BatchMetadata(context_lens=[2**62], query_lens=[2**62], block_ids=[[0]], block_size=16, num_blocks=4)


def test_seq_lens_shorter_than_query_lens_are_refused_before_subtracting():
    with pytest.raises(attn.Error, match=r"seq_lens\[0\]=-9223372036854775808 .*query_lens\[0\] = 1"):
        attn.BatchMetadata(seq_lens=[-(2**63)], query_lens=[1], block_ids=[[0]], block_size=16, num_blocks=4)


def test_threads_beyond_the_limit_are_refused():
    cfg = attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=64, dtype="float32")
    with pytest.raises(attn.Error, match=r"num_threads=100000 .*<= 1024"):
        attn.Attention(cfg, num_threads=100000)


def test_head_size_beyond_every_backend_is_refused():
    with pytest.raises(attn.Error, match=r"head_size=100000 .*<= 2048"):
        attn.select(attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=100000))


def test_cuda_version_beyond_int_is_refused():
    cfg = attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=64)
    with pytest.raises(attn.Error, match=r"platform='cuda:2147483647.0' .*major 1..99"):
        attn.select(cfg, platform="cuda:2147483647.0")
