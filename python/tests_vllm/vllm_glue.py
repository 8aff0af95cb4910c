"""pytest plugin (-p vllm_glue) that points vLLM's own attention-backend numerics tests
(tests/v1/attention/test_attention_backends.py, from vLLM's source release: scripts/install_vllm.py)
at attn's vLLM backend on vLLM's CPU platform. The glue, and nothing else:

- the backend lists the tests iterate become [CPU_ATTN], the enum member whose class attn's
  plugin replaces (register()); FlexAttention's extra block-size-128 pass is not taken (that pass
  exists for FlexAttention's own kernel, not the one under test);
- the model ids the tests name resolve, offline, to local config files in a private hub cache:
  Meta-Llama-3-8B from the project's own Llama-3.1-8B config (same attention shape, 32 / 8 heads x
  128), and for microsoft/Phi-tiny-MoE-instruct (used for its sliding window) a Mistral-7B-shaped
  config with a 128-token window, so the window cuts every case of those lengths;
- encoder-only cases are skipped with the reason: attn leaves encoder-only layers to CPU_ATTN, so
  they would test vLLM's kernel, not attn's;
- attn reads vLLM's canonical [K | V] content (ATTN_VLLM_KV_LAYOUT=canonical), the content these
  tests pre-populate; its default pairs blocks are checked by attn's own tests (python/tests_vllm);
- the `default_vllm_config` fixture of vLLM's root conftest (not copied: its imports reach far).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_HUB = Path(os.environ.get("ATTN_VLLM_HF_HOME", Path(tempfile.gettempdir()) / "attn-vllm-hf"))
os.environ["HF_HOME"] = str(_HUB)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["ATTN_VLLM_KV_LAYOUT"] = "canonical"  # attn's own tests set the mode they check

_SNAPSHOT = "0" * 40


def _project_config(name: str, **override) -> dict:
    cfg = json.loads((_ROOT / "models" / f"{name}.json").read_text())
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_attn")}
    cfg.setdefault("torch_dtype", "bfloat16")
    cfg.update(override)
    return cfg


def _models() -> dict[str, dict]:
    return {
        "meta-llama/Meta-Llama-3-8B": _project_config("llama-3.1-8b", rope_scaling=None, max_position_embeddings=8192),
        "microsoft/Phi-tiny-MoE-instruct": _project_config("mistral-7b", sliding_window=128),
    }


def _write_hub() -> None:
    for repo, cfg in _models().items():
        base = _HUB / "hub" / ("models--" + repo.replace("/", "--"))
        snap = base / "snapshots" / _SNAPSHOT
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text(json.dumps(cfg, indent=1))
        (base / "refs").mkdir(exist_ok=True)
        (base / "refs" / "main").write_text(_SNAPSHOT)


def pytest_configure(config) -> None:
    _write_hub()
    from attn.integrations import vllm as attn_vllm

    assert attn_vllm.register(), "attn's vLLM plugin did not register (not vLLM's CPU platform, or ATTN_VLLM=0)"


@pytest.fixture()
def default_vllm_config():
    from vllm.config import VllmConfig, set_current_vllm_config

    config = VllmConfig()
    with set_current_vllm_config(config):
        yield config


_LISTS = ("BACKENDS_TO_TEST", "SLIDING_WINDOW_BACKENDS_TO_TEST", "SLIDING_WINDOW_ENCODER_BACKENDS_TO_TEST",
          "NON_CAUSAL_BACKENDS_TO_TEST")


def pytest_collection_modifyitems(config, items) -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    patched = set()
    for item in items:
        module = getattr(item, "module", None)
        if module is None or not hasattr(module, "BACKENDS_TO_TEST"):
            continue
        if id(module) not in patched:
            for name in _LISTS:
                if hasattr(module, name):
                    getattr(module, name)[:] = [AttentionBackendEnum.CPU_ATTN]
            newer = module.is_torch_equal_or_newer
            module.is_torch_equal_or_newer = lambda v, _newer=newer: False if v == "2.9.0.dev0" else _newer(v)
            patched.add(id(module))
        if "encoder" in item.name:
            item.add_marker(pytest.mark.skip(reason="encoder-only layers stay on vLLM's CPU_ATTN under attn's plugin: "
                                                    "the case would test CPU_ATTN, not attn"))
