"""attn as vLLM's attention backend on CPU.

Installed with attn, a `vllm.general_plugins` entry point (`attn`) calls register() in every vLLM
process (the engine core, workers, `vllm serve`): on vLLM's CPU platform it puts attn's backend
(vllm_backend.AttnBackend) where vLLM's CPU platform looks up CPU_ATTN, so decoder attention
layers run on attn's kernels, reading and writing vLLM's own KV cache tensor in place. Layers attn
does not serve keep vLLM's CPU_ATTN kernel; vLLM's log says which layers went where and why.

Off switches: ATTN_VLLM=0 in the environment, or vLLM's own VLLM_PLUGINS (a comma-separated list
of the plugins to load; leave out "attn").
"""
from __future__ import annotations

import os

NAME = "attn"
BACKEND_CLASS = "attn.integrations.vllm_backend.AttnBackend"


def enabled() -> bool:
    return os.environ.get("ATTN_VLLM", "1").strip().lower() not in ("0", "false", "off", "no")


def register() -> bool:
    """Makes attn vLLM's CPU attention backend (once per process); False when switched off or not
    on vLLM's CPU platform."""
    if not enabled():
        return False
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_CLASS)
    _forget_earlier_selections()
    _keep_canonical_cache_content()
    from vllm.logger import init_logger

    init_logger("vllm.attn").info_once("attn %s serves attention on vLLM's CPU platform (ATTN_VLLM=0 turns it off)",
                                       _version())
    return True


def _forget_earlier_selections() -> None:
    """vLLM caches each layer kind's backend class per process (keyed by the layer's attention
    config, not by the registry): an engine built before register() leaves CPU_ATTN's class in that
    cache, and every later engine in the process would get it too. Dropping the cached choices
    makes engines built from now on resolve CPU_ATTN's entry again, i.e. attn's backend; engines
    already built keep the backend they have."""
    from vllm.v1.attention import selector

    cached = getattr(selector, "_cached_get_attn_backend", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attn")
    except PackageNotFoundError:
        return "(source tree)"


_packing_adapted = False


def _keep_canonical_cache_content() -> None:
    """vLLM's KV transfer writes received blocks in its canonical per-token [K | V] content, then
    CpuPlatform.pack_kv_cache reorders them into CPU_ATTN's private block layout. For the caches
    of layers attn serves it rewrites them as attn's pairs blocks instead, or leaves them as they
    are where attn reads the canonical content (CPU_ATTN's packing still runs for its layers)."""
    global _packing_adapted
    if _packing_adapted:
        return
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.pack_kv_cache.__func__

    def pack_kv_cache(cls, kv_cache, indices) -> None:
        from . import vllm_backend

        if kv_cache.dim() == 4 and not vllm_backend.left_to_cpu_attn(kv_cache):
            vllm_backend.pack_arrived_blocks(kv_cache, indices)
            return
        original(cls, kv_cache, indices)

    CpuPlatform.pack_kv_cache = classmethod(pack_kv_cache)
    _packing_adapted = True
