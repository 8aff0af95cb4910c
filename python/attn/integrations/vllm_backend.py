"""vLLM's attention backend on attn's kernels (vLLM's CPU platform; see attn.integrations.vllm).

vLLM owns the KV cache: per layer a tensor of logical shape [num_blocks, num_kv_heads, block_size,
2 * head_size] holding each token's [K | V] row, laid out as one of vLLM's KVCacheLayouts. attn
reads and writes it in place, no copy, in one of two ways (ATTN_VLLM_KV_LAYOUT):
- "pairs" (the default, for bf16 caches in block-compact layouts on CPUs with AVX-512 BF16, whose
  kernels read pairs; elsewhere attn reads the canonical content): each block's bytes hold attn's
  HND_PAIRS block (K dims and V keys in pairs: what its bf16 dot-product kernels stream, about 2x
  the row kernels' speed), as vLLM's own CPU_ATTN keeps its private block layout. vLLM's layout
  hooks cannot declare a pair order, so like CPU_ATTN the content is not vLLM's canonical one:
  blocks vLLM's KV transfer writes in canonical content are converted on arrival
  (CpuPlatform.pack_kv_cache, adapted by the plugin).
- "canonical" (other dtypes and layouts, or when asked): vLLM's canonical content read at vLLM's
  strides (KVCache.from_views over the K and V halves); what vLLM's own backend tests check.

Per step, the metadata builder keeps vLLM's CommonAttentionMetadata; the first layer that runs
builds one attn BatchMetadata per cache geometry and one plan per layer config, shared by every
other layer of the step. forward() writes the step's K/V into their slots and attends in one call.
Layers attn does not serve (its selector picks no backend but the reference oracle for them, an
attention type attn does not take from vLLM here) run vLLM's own CPU_ATTN kernel unchanged.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from vllm.config import VllmConfig, get_current_vllm_config, get_layers_from_vllm_config
from vllm.logger import init_logger
from vllm.model_executor.layers.attention import Attention as VllmAttention
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionMetadataBuilder, AttentionType,
                                       CommonAttentionMetadata)
from vllm.v1.attention.backends.cpu_attn import (CPUAttentionBackend, CPUAttentionBackendImpl,
                                                 CPUAttentionMetadataBuilder)
from vllm.v1.kv_cache_interface import KVCacheLayout

import attn

logger = init_logger("vllm.attn")  # under vLLM's namespace: its log configuration prints it

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# vLLM's kv_cache_dtype names → attn's (vLLM's "fp8" on CPU is e4m3).
_KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_FP8_STORAGE = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
_ATTN_TYPES = (AttentionType.DECODER,)  # what this backend takes from vLLM; the rest stays on CPU_ATTN
_workspace = attn.Workspace()

# Caches of the layers left to CPU_ATTN (by data pointer): vLLM's KV transfer packs those into
# CPU_ATTN's private block layout; attn's are converted to its own (pairs) or left canonical.
_cpu_attn_caches: set[int] = set()


def left_to_cpu_attn(kv_cache: torch.Tensor) -> bool:
    return kv_cache.data_ptr() in _cpu_attn_caches


def kv_layout_mode() -> str:
    mode = os.environ.get("ATTN_VLLM_KV_LAYOUT", "pairs").strip().lower()
    if mode not in ("pairs", "canonical"):
        raise attn.Error(f"ATTN_VLLM_KV_LAYOUT={mode!r} invalid: expected 'pairs' or 'canonical'")
    return mode


def _block_compact(kv: torch.Tensor) -> bool:
    """Each block's H x N x 2D elements one contiguous run, blocks back to back (any inner order)."""
    nb, h, n, c = kv.shape
    inner = sorted((kv.stride(d), kv.size(d)) for d in (1, 2, 3))
    expected = 1
    for stride, size in inner:
        if stride != expected:
            return False
        expected *= size
    return kv.stride(0) == h * n * c


def pairs_view(kv: torch.Tensor) -> torch.Tensor | None:
    """vLLM's bf16 cache tensor as attn's HND_PAIRS blocks [num_blocks, 2, H, N, D] over the same
    bytes, or None where attn reads it canonically (another dtype, sizes pairs do not fit, a layout
    whose blocks are not compact, a CPU whose kernels read rows: no AVX-512 BF16, or
    ATTN_VLLM_KV_LAYOUT=canonical)."""
    if kv_layout_mode() != "pairs" or kv.dim() != 4 or kv.dtype != torch.bfloat16 or not _block_compact(kv):
        return None
    nb, h, n, c = kv.shape
    d = c // 2
    if d % 2 or n % 16 or _writer(h, d).kv_cache_layout != "HND_PAIRS":
        return None
    return torch.as_strided(kv, (nb, 2, h, n, d), (h * n * c, h * n * d, n * d, d, 1), kv.storage_offset())


@functools.lru_cache(maxsize=None)
def _writer(heads: int, head_size: int) -> attn.Attention:
    return attn.Attention(attn.LayerConfig(num_heads=heads, num_kv_heads=heads, head_size=head_size, dtype="bfloat16"))


def pack_arrived_blocks(kv: torch.Tensor, indices: torch.Tensor) -> bool:
    """Blocks vLLM's KV transfer wrote in canonical [K | V] content, rewritten as attn's pairs
    blocks in place; False when attn reads this cache canonically (nothing to do)."""
    view = pairs_view(kv)
    if view is None:
        return False
    nb, h, n, c = kv.shape
    d = c // 2
    blocks = [int(b) for b in torch.as_tensor(indices).flatten().tolist()]
    canon = kv[blocks].clone()  # the logical view: vLLM's content in whichever layout it allocated
    k = canon[..., :d].permute(0, 2, 1, 3).reshape(-1, h, d)  # [blocks * N, H, D] in block order
    v = canon[..., d:].permute(0, 2, 1, 3).reshape(-1, h, d)
    cache = attn.KVCache.from_dlpack(view, layout="HND_PAIRS")
    md = attn.BatchMetadata(context_lens=[0], query_lens=[len(blocks) * n], block_ids=[blocks], cache=cache)
    _writer(h, d).write_kv(k, v, cache, md)
    return True


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _serving_backend(cfg: attn.LayerConfig) -> tuple[str | None, str]:
    """(attn backend, why) for a layer config: None when attn's selector picks nothing or only
    its reference oracle (exact but not fast: CPU_ATTN serves such a layer better)."""
    try:
        d = attn.select(cfg)
    except attn.Error as e:
        return None, str(e)
    if d.backend == "reference":
        return None, "attn's selector has only its reference oracle for it"
    return d.backend, f"{d.backend} ({d.variant})" if d.variant else d.backend


@functools.lru_cache(maxsize=None)
def _probe(**fields) -> bool:
    base = dict(num_heads=8, num_kv_heads=2, head_size=128, dtype="bfloat16")
    base.update(fields)
    try:
        cfg = attn.LayerConfig(**base)
    except (attn.Error, ValueError, TypeError):
        return False
    return _serving_backend(cfg)[0] is not None


# --- what the backend declares: probed from attn's selector, not listed by hand ---

def _supported_dtypes() -> list[torch.dtype]:
    return [t for name, t in _TORCH_DTYPES.items() if _probe(dtype=name)]


def _supported_kv_cache_dtypes() -> list[str]:
    return [name for name, kv in _KV_CACHE_DTYPES.items() if kv == "auto" or _probe(kv_cache_dtype=kv)]


@functools.lru_cache(maxsize=1)
def _supported_head_sizes() -> list[int]:
    return [d for d in range(1, 1025) if _probe(head_size=d, head_size_v=d)]


class AttnBackend(AttentionBackend):
    """attn's CPU kernels behind vLLM's attention-backend interface."""

    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = _supported_dtypes()
    supported_kv_cache_dtypes: ClassVar[list[str]] = _supported_kv_cache_dtypes()

    @staticmethod
    def get_name() -> str:
        # vLLM maps backend names back to its enum: this class is what CPU_ATTN's entry now names.
        return "CPU_ATTN"

    @staticmethod
    def get_impl_cls() -> type["AttnImpl"]:
        return AttnImpl

    @staticmethod
    def get_builder_cls() -> type["AttnMetadataBuilder"]:
        return AttnMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        # attn reads vLLM's rows at any block size; layers left to CPU_ATTN need its sizes.
        return CPUAttentionBackend.get_supported_kernel_block_sizes(kv_cache_spec)

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return _supported_head_sizes()

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # Head-major blocks first (each head's rows contiguous: what attn's row kernels stream);
        # CPU_ATTN, serving the layers attn does not, reads only that one.
        return (KVCacheLayout.LBHNC, KVCacheLayout.LBNHC)

    @classmethod
    def supports_sink(cls) -> bool:
        return _probe(has_sink=True)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return _probe(sliding_window=64)

    @classmethod
    def supports_non_causal(cls) -> bool:
        return _probe(use_non_causal=True)

    @classmethod
    def supports_alibi_sqrt(cls) -> bool:
        return False

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return CPUAttentionBackend.supports_attn_type(attn_type)


@dataclass
class AttnMetadata:
    """One step: vLLM's metadata, and what attn builds from it once for all layers."""

    common: CommonAttentionMetadata
    num_actual_tokens: int
    causal: bool
    slot_mapping: torch.Tensor
    builder: "AttnMetadataBuilder"
    plans: dict = field(default_factory=dict)    # cache geometry → attn.StepPlans (its BatchMetadata and plans)
    cpu_attn: object = None                      # CPU_ATTN's metadata, built on a fallback layer's first call

    def plans_for(self, cache: attn.KVCache) -> attn.StepPlans:
        geometry = (cache.num_blocks, cache.block_size)
        plans = self.plans.get(geometry)
        if plans is None:
            cm, n = self.common, self.common.num_reqs
            qsl = cm.query_start_loc_cpu[: n + 1]
            md = attn.BatchMetadata(
                query_lens=(qsl[1:] - qsl[:-1]), seq_lens=cm.seq_lens[:n].cpu(), block_ids=cm.block_table_tensor[:n],
                cache=cache, causal=self.causal, slot_mapping=self.slot_mapping)
            plans = self.plans[geometry] = attn.StepPlans(md)
        return plans

    def for_cpu_attn(self):
        if self.cpu_attn is None:
            self.cpu_attn = self.builder.cpu_attn_builder().build(0, self.common)
        return self.cpu_attn


class AttnMetadataBuilder(AttentionMetadataBuilder[AttnMetadata]):
    def __init__(self, kv_cache_spec, layer_names: list[str], vllm_config: VllmConfig, device: torch.device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._args = (kv_cache_spec, layer_names, vllm_config, device)
        self._cpu_attn_builder = None
        self._log_layers(vllm_config, layer_names)

    @staticmethod
    def _log_layers(vllm_config, layer_names) -> None:
        served, left = {}, {}
        for name, layer in get_layers_from_vllm_config(vllm_config, VllmAttention, layer_names).items():
            impl = getattr(layer, "impl", None)
            if not isinstance(impl, AttnImpl):
                continue
            (served if impl.backend else left).setdefault(impl.why, []).append(name)
        for why, names in served.items():
            logger.info("attn serves %d attention layer(s) with %s: %s", len(names), why, ", ".join(names))
        for why, names in left.items():
            logger.info("attn leaves %d attention layer(s) to CPU_ATTN (%s): %s", len(names), why, ", ".join(names))

    def cpu_attn_builder(self) -> CPUAttentionMetadataBuilder:
        if self._cpu_attn_builder is None:
            self._cpu_attn_builder = CPUAttentionMetadataBuilder(*self._args)
        return self._cpu_attn_builder

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AttnMetadata:
        # common_prefix_len (cascade attention) is a hint only: the block tables hold the prefix.
        cm = common_attn_metadata
        causal = cm.causal
        if isinstance(causal, torch.Tensor):  # per-request causality: attn plans one flag per step
            flags = causal.tolist()
            causal = bool(flags[0]) if flags and all(f == flags[0] for f in flags) else None
        n = cm.num_actual_tokens
        return AttnMetadata(common=cm, num_actual_tokens=n, causal=causal, slot_mapping=cm.slot_mapping[:n],
                            builder=self)


class AttnImpl(AttentionImpl):
    """One vLLM attention layer on attn (or on CPU_ATTN, when attn does not serve it)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int, alibi_slopes,
                 sliding_window: int | None, kv_cache_dtype: str, logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None) -> None:
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sinks = sinks
        self.alibi_slopes = None if alibi_slopes is None else [float(s) for s in alibi_slopes]
        self.sliding_window = sliding_window
        self.logits_soft_cap = logits_soft_cap
        dtype = _dtype_name(get_current_vllm_config().model_config.dtype)
        self._fields = dict(num_heads=num_heads, num_kv_heads=num_kv_heads, head_size=head_size, dtype=dtype,
                            kv_cache_dtype=_KV_CACHE_DTYPES.get(kv_cache_dtype, kv_cache_dtype),
                            sliding_window=sliding_window or 0, logits_soft_cap=logits_soft_cap or 0.0,
                            has_sink=sinks is not None, use_alibi=alibi_slopes is not None)
        self.backend, self.why = self._choose()
        self._layers: dict[bool, attn.Attention] = {}  # by causal flag
        self._cache_key = None
        self._cache: attn.KVCache | None = None
        self._scales = None
        self._cpu = None
        if self.backend is None:
            self._cpu = CPUAttentionBackendImpl(num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window,
                                                kv_cache_dtype, logits_soft_cap, attn_type,
                                                kv_sharing_target_layer_name, sinks)

    def _choose(self) -> tuple[str | None, str]:
        if self.attn_type not in _ATTN_TYPES:
            return None, f"attention type {self.attn_type}: attn takes decoder layers from vLLM"
        if self.kv_cache_dtype not in _KV_CACHE_DTYPES:
            return None, f"kv_cache_dtype {self.kv_cache_dtype}"
        try:
            cfg = attn.LayerConfig(**self._fields)
        except (attn.Error, ValueError) as e:
            return None, str(e)
        return _serving_backend(cfg)

    def _layer(self, causal: bool) -> attn.Attention:
        """The attn layer for this causality (made once: every forward looks it up)."""
        served = self._layers.get(causal)
        if served is None:
            cfg = attn.LayerConfig(**self._fields, use_non_causal=not causal)
            sinks = None if self.sinks is None else self.sinks.detach().float().tolist()  # loaded weights by now
            layer = attn.Attention(cfg, scale=self.scale, sinks=sinks, alibi_slopes=self.alibi_slopes,
                                   num_threads=torch.get_num_threads())
            served = self._layers[causal] = layer
        return served

    def _wrap(self, kv_cache: torch.Tensor) -> attn.KVCache:
        """vLLM's [num_blocks, num_kv_heads, block_size, 2 * head_size] tensor as an attn cache: its
        bytes as pairs blocks, or its K and V halves at vLLM's strides (once per tensor)."""
        key = (kv_cache.data_ptr(), tuple(kv_cache.shape), tuple(kv_cache.stride()), kv_cache.dtype)
        if key != self._cache_key:
            pairs = pairs_view(kv_cache) if self._layer(True).kv_cache_layout == "HND_PAIRS" else None
            if pairs is not None:
                self._cache, self._cache_key, self._scales = attn.KVCache.from_dlpack(pairs, layout="HND_PAIRS"), key, None
                return self._cache
            kv = kv_cache
            storage = _FP8_STORAGE.get(self._fields["kv_cache_dtype"])
            if storage is not None and kv.dtype != storage:
                kv = kv.view(storage)
            d = self.head_size
            k, v = kv[..., :d].permute(0, 2, 1, 3), kv[..., d:].permute(0, 2, 1, 3)
            self._cache, self._cache_key, self._scales = attn.KVCache.from_views(k, v), key, None
        return self._cache

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                attn_metadata: AttnMetadata | None, output: torch.Tensor, output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported by attn's vLLM backend")
        if attn_metadata is None:  # vLLM's warm-up and profiling runs
            return output
        if self._cpu is not None:
            return self._forward_cpu_attn(layer, query, key, value, kv_cache, attn_metadata, output)
        md = attn_metadata
        if md.causal is None:
            raise attn.Error("metadata.causal invalid: expected one causal flag for every request of a step "
                             "(attn plans a step as all causal or all bidirectional)")
        cache = self._wrap(kv_cache)
        plans = md.plans_for(cache)
        n = plans.metadata.num_tokens
        if self._fields["kv_cache_dtype"] != "auto":
            scales = (float(layer._k_scale_float), float(layer._v_scale_float))
            if scales != self._scales:
                cache.set_scales(*scales)
                self._scales = scales
        attn_layer = self._layer(md.causal)
        plan = plans.for_layer(attn_layer, cache)
        write = key is not None and value is not None and self.kv_sharing_target_layer_name is None
        out = output[:n].view(n, self.num_heads, -1)
        attn_layer.run(plan, query[:n], cache, out=out, k=key[:n] if write else None, v=value[:n] if write else None,
                       workspace=_workspace)
        return output

    def _forward_cpu_attn(self, layer, query, key, value, kv_cache, md: AttnMetadata, output):
        if kv_cache.numel():
            _cpu_attn_caches.add(kv_cache.data_ptr())
        cpu_md = md.for_cpu_attn()
        if self.kv_sharing_target_layer_name is None and key is not None and value is not None:
            self._cpu.do_kv_cache_update(layer, key, value, kv_cache, cpu_md.slot_mapping)
        return self._cpu.forward(layer, query, key, value, kv_cache, cpu_md, output)
