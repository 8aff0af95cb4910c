"""Selection from Python: capability records, platforms, LayerConfig, Decision, plan, select_mamba."""
import json
import pickle
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import attn

LLAMA = dict(num_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16")


def test_backends_are_capability_records():
    records = attn.backends()
    names = [b.name for b in records]
    assert "reference" in names and len(set(names)) == len(names)
    ref = records[names.index("reference")]
    assert "cpu" in ref.platforms and "bfloat16" in ref.dtypes and "sinks" in ref.features
    d = ref.to_dict()
    assert d["name"] == "reference" and d["priority"] == ref.priority and "reference" in repr(ref)
    assert ref.kv_layout_rule is None and d["kv_layout_rule"] is None


def test_cpu_flash_states_which_caches_get_its_pair_layout():
    flash = {b.name: b for b in attn.backends()}["cpu_flash"]
    assert flash.kv_layout == "HND_PAIRS"
    assert flash.kv_layout_rule == {"q_dtypes": ["bfloat16"], "storage_dtypes": ["bfloat16", "fp8_e4m3", "fp8_e5m2", "int8"],
                                    "otherwise": "HND", "cpu_features": ["avx512_bf16"]}
    assert flash.to_dict()["kv_layout_rule"] == flash.kv_layout_rule


def test_platform_detected_and_planning_targets():
    here = attn.platform()
    assert here.kind == "cpu" and here.detected and here.cores >= 1
    assert all(isinstance(f, str) for f in here.features)
    gpu = attn.platform("cuda:9.0")
    assert gpu.kind == "cuda" and gpu.compute_capability == "9.0" and not gpu.detected
    with pytest.raises(ValueError, match="platform"):
        attn.platform("tpu")


def test_layer_config_keywords_mirror_the_seeds():
    # vLLM's get_attn_backend(head_size, dtype, kv_cache_dtype, use_mla, has_sink, use_sparse,
    # use_mm_prefix, use_per_head_quant_scales, attn_type, num_heads) spelled as keywords.
    cfg = attn.LayerConfig(head_size=128, dtype=np.float16, kv_cache_dtype=None, use_mla=False, has_sink=False,
                           use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False, attn_type=None,
                           num_heads=32, sliding_window=None, block_size=16)
    assert (cfg.dtype, cfg.kv_cache_dtype, cfg.attn_type, cfg.sliding_window) == ("float16", "auto", "decoder", 0)
    assert attn.LayerConfig(dtype=ml_dtypes.bfloat16).dtype == "bfloat16"
    assert attn.LayerConfig(dtype="bf16").dtype == "bfloat16"
    assert attn.LayerConfig(kv_cache_dtype="fp8").kv_cache_dtype == "fp8"
    assert attn.LayerConfig(num_heads=8, num_kv_heads=2).kind == "full_attention"
    assert attn.LayerConfig(sliding_window=4096).kind == "sliding_window"


def test_layer_config_round_trips_and_hashes():
    cfg = attn.LayerConfig(**LLAMA, sliding_window=128, logits_soft_cap=30.0, has_sink=True)
    # Every field the core renders is a keyword the constructor takes (the table cannot drift).
    again = attn.LayerConfig(**cfg.to_dict())
    assert again == cfg and hash(again) == hash(cfg)
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    other = cfg.replace(head_size=64)
    assert other.head_size == 64 and cfg.head_size == 128 and other != cfg
    assert len({cfg, again, other}) == 2
    assert repr(cfg).startswith("LayerConfig(num_heads=32")


def test_layer_config_rejects_bad_keywords_and_values():
    with pytest.raises(TypeError, match="unexpected keyword 'head_sze'.*head_size"):
        attn.LayerConfig(head_sze=128)
    with pytest.raises(TypeError, match="LayerConfig.num_heads='32' invalid: expected an int"):
        attn.LayerConfig(num_heads="32")
    with pytest.raises(ValueError, match="kv_cache_dtype.*Valid values are"):
        attn.LayerConfig(kv_cache_dtype="fp7")
    with pytest.raises(ValueError, match="dtype"):
        attn.LayerConfig(dtype="float64")
    with pytest.raises(attn.Error, match="num_kv_heads"):
        attn.LayerConfig(num_heads=12, num_kv_heads=8).validate()


def test_select_returns_an_explained_decision():
    cfg = attn.LayerConfig(**LLAMA)
    d = attn.select(cfg)
    assert d.backend in [b.name for b in attn.backends()]
    assert d.config == cfg and d.block_size > 0 and d.forced_by == ""
    chosen = [c for c in d.candidates if c.backend == d.backend]
    assert chosen and chosen[0].valid and not chosen[0].reasons
    for c in d.candidates:
        assert c.valid == (not c.reasons), c  # every loser says why
        for r in c.reasons:
            assert r.field and r.expected and str(r).startswith(r.field)
    text = repr(d)
    assert text.startswith("backend: " + d.backend) and "candidates:" in text
    as_dict = d.to_dict()
    assert as_dict == json.loads(d.to_json())
    assert as_dict["backend"] == d.backend and len(as_dict["candidates"]) == len(d.candidates)


def test_forced_backend_and_its_errors():
    cfg = attn.LayerConfig(**LLAMA)
    d = attn.select(cfg, backend="reference")
    assert d.backend == "reference" and d.forced_by == "argument"
    with pytest.raises(attn.Error, match="reference") as err:  # unknown names list the known ones
        attn.select(cfg, backend="no_such_backend")
    assert isinstance(err.value, ValueError)
    # An attention layer forced onto the attention-free backend: its reasons, and who would serve.
    with pytest.raises(ValueError, match="is_attention_free"):
        attn.select(cfg, backend="no_attention")


def test_no_valid_backend_lists_every_reason():
    # float32 on a CUDA planning target: no CUDA backend takes fp32 (and CPU ones are not candidates).
    cfg = attn.LayerConfig(**dict(LLAMA, dtype="float32"))
    d = attn.explain(cfg, platform="cuda:9.0")
    assert d.backend == "" and all(not c.valid for c in d.candidates)
    with pytest.raises(attn.Error) as err:
        attn.select(cfg, platform="cuda:9.0")
    for c in d.candidates:
        assert c.backend in str(err.value)


def test_platform_argument_plans_for_another_machine():
    cfg = attn.LayerConfig(**LLAMA)
    gpu = attn.explain(cfg, platform="cuda:9.0")
    assert "cuda" in gpu.platform
    cpu_only = {b.name for b in attn.backends() if b.platforms == ["cpu"]}
    assert gpu.backend not in cpu_only


def test_plan_a_builtin_model_and_a_config_file(tmp_path):
    assert "llama-3.1-8b" in attn.builtin_models()
    p = attn.plan("llama-3.1-8b")
    assert p.model.num_layers == len(p.layers) == 32
    assert all(l.kind == "attention" and l.backend for l in p.layers)
    assert sum(p.backends().values()) == 32
    assert "layers 0-31" in repr(p)
    assert p.to_dict()["layers"][0]["decision"]["backend"] == p.layers[0].backend

    # A folder holding a config.json plans the same as the built-in copy.
    repo_config = Path(__file__).resolve().parents[2] / "models" / "llama-3.1-8b.json"
    (tmp_path / "config.json").write_text(repo_config.read_text())
    q = attn.plan(str(tmp_path), kv_cache_dtype="fp8")
    assert q.model.num_layers == p.model.num_layers
    assert all(l.config.kv_cache_dtype == "fp8" for l in q.layers)


def test_plan_groups_and_ranges_come_from_the_library():
    p = attn.plan("gemma-2-9b", platform="cpu:avx2")  # alternating sliding / full layers
    assert [ids for ids, _ in p.groups()] == [list(range(0, 42, 2)), list(range(1, 42, 2))]
    assert "layers 0,2,4,...,40" in repr(p) and "layers 1,3,5,...,41" in repr(p)  # the CLI's format
    core = attn.plan_model(attn.load_model("gemma-2-9b"), "cpu:avx2")
    assert [g.layer_ranges for g in core.groups] == ["0,2,4,...,40", "1,3,5,...,41"]
    assert [g["layer_ranges"] for g in p.to_dict()["groups"]] == [g.layer_ranges for g in core.groups]
    assert all(g.kind == "attention" and g.decision.backend for g in core.groups) and core.all_served()
    reason = next(r for c in core.groups[0].decision.candidates for r in c.reasons)
    assert isinstance(reason.field, str) and str(reason).startswith(reason.field + "=")


def test_plan_errors_name_model_and_layer():
    with pytest.raises(ValueError, match="layers 0-31 of llama-3.1-8b"):
        attn.plan("llama-3.1-8b", backend="no_attention")
    with pytest.raises(ValueError, match="built-in model"):
        attn.plan("no-such-model")


def test_select_mamba_and_mixer_plans():
    d = attn.select_mamba("mamba2")
    assert d.backend and any(c.backend == d.backend and c.valid for c in d.candidates)
    assert [m for m in attn.mixer_backends() if "mamba2" in m["types"]]
    assert all(m["platforms"] == ["cpu"] for m in attn.mixer_backends())
    with pytest.raises(ValueError, match="mamba1"):  # the error lists the valid types
        attn.select_mamba("mamba3")
    p = attn.plan("mamba-130m")
    assert p.layers and all(l.kind == "mixer" and l.mixer == "mamba1" for l in p.layers)


def test_wrongly_typed_backend_and_per_kind_are_type_errors_naming_them():
    cfg = attn.LayerConfig(**LLAMA)
    with pytest.raises(TypeError, match="backend=5 invalid: expected a str or None"):
        attn.Attention(cfg, 5)
    with pytest.raises(TypeError, match="backend=5 invalid"):
        attn.select(cfg, backend=5)
    with pytest.raises(TypeError, match="per_kind=.* invalid: expected a dict"):
        attn.select(cfg, per_kind={"decoder": 3})


def test_error_is_a_value_error():
    assert issubclass(attn.Error, ValueError)
    with pytest.raises(ValueError, match="nonexistent"):
        attn.select(attn.LayerConfig(**LLAMA), backend="nonexistent")
