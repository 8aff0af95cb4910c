"""attn: choose an attention backend for a layer, and run it on NumPy / PyTorch arrays.

    import attn, numpy as np, ml_dtypes
    cfg = attn.LayerConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16")
    print(attn.select(cfg))                      # the chosen backend and why the others lost
    layer = attn.Attention(cfg)
    cache = layer.make_cache(num_blocks=64)
    md = attn.BatchMetadata(context_lens=[100], query_lens=[1], block_ids=[[0, 1]], cache=cache)
    kv = np.ones((1, 8, 128), ml_dtypes.bfloat16)
    layer.write_kv(kv, kv, cache, md)            # the step's new key and value
    q = np.ones((1, 32, 128), ml_dtypes.bfloat16)
    out = layer.forward(q, cache, md)            # q: [tokens, heads, head_size], no copies
    plan = layer.plan(md, cache)                 # or: plan once per step ...
    out = layer.run(plan, q, cache)              # ... and run every layer under it
    dense = attn.attention(q[None], q[None], q[None], layout="bshd")  # SDPA-style (q, k, v)

Everything is the C++ core (``attn._core``); this package adds ``plan``, the dense
``attention(q, k, v)`` entry point, ``attn.integrations`` and the benchmark plot.
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
    HeadSharding,
    KVCache,
    LayerConfig,
    ModelLayer,
    ModelPlan,
    ModelSpec,
    PlanGroup,
    Platform,
    Reason,
    StepPlan,
    StepPlans,
    Workspace,
    backends,
    builtin_models,
    clear_selector_cache,
    explain,
    load_model,
    load_plugin,
    mixer_backends,
    pipeline_stages,
    plan_model,
    platform,
    select,
    select_mamba,
    shard_heads,
    shard_layer_config,
    shard_model,
    reload_tuning,
    tune,
    tuning_file_path,
)
from ._plan import Plan, PlannedLayer, plan  # noqa: E402
from .dense import attention  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Attention", "attention", "BackendInfo", "BatchMetadata", "Candidate", "Decision", "Error", "HeadSharding", "KVCache",
    "LayerConfig", "ModelLayer", "ModelPlan", "ModelSpec", "Plan", "PlanGroup", "PlannedLayer", "Platform", "Reason", "StepPlan", "StepPlans", "Workspace",
    "backends", "builtin_models", "clear_selector_cache", "explain", "load_model", "load_plugin", "mixer_backends",
    "pipeline_stages", "plan", "plan_model", "platform", "reload_tuning", "select", "select_mamba", "shard_heads", "shard_layer_config",
    "shard_model", "tune", "tuning_file_path",
]
