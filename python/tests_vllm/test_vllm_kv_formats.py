"""attn's quantized KV formats against the constants vLLM's own CPU build computes: TurboQuant's slot
size per preset and head size (TurboQuantConfig), and the Lloyd-Max centroids attn buckets keys by
(vLLM's get_centroids). The byte formulas themselves are checked in python/tests; these tests make
sure the numbers both sides derive are vLLM's, not a re-derivation's."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import attn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kv_formats import walsh_hadamard  # noqa: E402  (attn's own Python tests' format models)

config = pytest.importorskip("vllm.model_executor.layers.quantization.turboquant.config")
lloyd_max = pytest.importorskip("vllm.model_executor.layers.quantization.turboquant.centroids")

PRESETS = ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"]


@pytest.mark.parametrize("kv", PRESETS)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_turboquant_slot_size_is_vllms(kv, d):
    want = config.TurboQuantConfig.from_cache_dtype(kv, d)
    layer = attn.Attention(attn.LayerConfig(num_heads=2, num_kv_heads=1, head_size=d, dtype="bfloat16", kv_cache_dtype=kv))
    assert tuple(layer.kv_cache_shape(3)) == (3, 1, layer.block_size, want.slot_size_aligned)


def rotated_unit(x: np.ndarray) -> np.ndarray:
    """y = H (x / (|x| + 1e-8)) / sqrt(d) in float32, Sylvester order (vLLM's _build_hadamard)."""
    x = x.astype(np.float32)
    norm = np.sqrt((x * x).sum(-1, dtype=np.float32, keepdims=True))
    return walsh_hadamard(x / (norm + np.float32(1e-8))) * (np.float32(1) / np.sqrt(np.float32(x.shape[-1])))


@pytest.mark.parametrize("kv,bits", [("turboquant_4bit_nc", 4), ("turboquant_k3v4_nc", 3), ("turboquant_3bit_nc", 3)])
@pytest.mark.parametrize("d", [64, 128])
def test_keys_are_bucketed_by_vllms_centroids(kv, bits, d):
    c = np.sort(lloyd_max.get_centroids(d, bits).numpy().astype(np.float32))
    mid = ((c[:-1] + c[1:]) / np.float32(2)).astype(np.float32)
    layer = attn.Attention(attn.LayerConfig(num_heads=2, num_kv_heads=1, head_size=d, dtype="float32", kv_cache_dtype=kv))
    cache = layer.make_cache(2)
    rng = np.random.default_rng(d + bits)
    k = (rng.standard_normal((layer.block_size, 1, d)) * 2).astype(np.float32)
    md = attn.BatchMetadata(context_lens=[0], query_lens=[layer.block_size], block_ids=[[1]], cache=cache)
    layer.write_kv(k, k, cache, md)
    slots = cache.numpy().view(np.uint8)[1, 0]  # block 1, KV head 0: [block_size, slot]
    want = (rotated_unit(k[:, 0])[..., None] >= mid).sum(-1)
    bitpos = np.arange(d) * bits
    raw = slots[:, bitpos // 8].astype(np.uint32) | (slots[:, np.minimum(bitpos // 8 + 1, slots.shape[1] - 1)].astype(np.uint32) << 8)
    got = (raw >> (bitpos % 8)) & ((1 << bits) - 1)
    np.testing.assert_array_equal(got, want)
    norm = slots[:, math.ceil(d * bits / 8):math.ceil(d * bits / 8) + 2].copy().view(np.float16)[:, 0]
    np.testing.assert_array_equal(norm, np.sqrt((k[:, 0] ** 2).sum(-1, dtype=np.float32)).astype(np.float16))
