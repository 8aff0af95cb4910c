"""attn: choose an attention backend for a layer, and run it on NumPy / PyTorch arrays.

    import attn, numpy as np, ml_dtypes
    cfg = attn.LayerConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16")
    print(attn.select(cfg))                      # the chosen backend and why the others lost
    layer = attn.Attention(cfg)
    cache = layer.make_cache(num_blocks=64)
    md = attn.BatchMetadata(context_lens=[100], query_lens=[1], block_ids=[[0, 1]], cache=cache)
    out = layer.forward(q, cache, md)           # q: [tokens, heads, head_size], no copies

Everything is the C++ core (``attn._core``); this package adds ``plan`` and the benchmark plot.
"""
import os as _os

# The wheel ships the built-in model configs next to the extension; the core reads
# ATTN_MODELS_DIR at call time, so point it there unless the user already chose a folder.
_models = _os.path.join(_os.path.dirname(__file__), "models")
if _os.path.isdir(_models):
    _os.environ.setdefault("ATTN_MODELS_DIR", _models)

from ._core import (  # noqa: E402
    Attention,
    BackendInfo,
    BatchMetadata,
    Candidate,
    Decision,
    Error,
    KVCache,
    LayerConfig,
    ModelLayer,
    ModelSpec,
    Platform,
    Reason,
    backends,
    builtin_models,
    clear_selector_cache,
    explain,
    load_model,
    load_plugin,
    mixer_backends,
    platform,
    select,
    select_mamba,
    reload_tuning,
    tune,
    tuning_file_path,
)
from ._plan import Plan, PlannedLayer, plan  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Attention", "BackendInfo", "BatchMetadata", "Candidate", "Decision", "Error", "KVCache", "LayerConfig",
    "ModelLayer", "ModelSpec", "Plan", "PlannedLayer", "Platform", "Reason", "backends", "builtin_models",
    "clear_selector_cache", "explain", "load_model", "load_plugin", "mixer_backends", "plan", "platform",
    "reload_tuning", "select", "select_mamba", "tune", "tuning_file_path",
]
