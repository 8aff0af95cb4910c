"""attn.tune from Python: it times the layer configs here, writes the tuning file, and select() then
reports the measured choice (Decision.tuned)."""
import json

import pytest

import attn

TINY = dict(num_heads=4, num_kv_heads=2, head_size=64, dtype="bfloat16")


@pytest.fixture
def tune_file(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("ATTN_TUNE_FILE", str(path))
    attn.reload_tuning()
    yield path
    monkeypatch.setenv("ATTN_TUNE_FILE", "off")
    attn.reload_tuning()


def test_tune_writes_the_file_select_reads(tune_file):
    cfg = attn.LayerConfig(**TINY)
    assert attn.tuning_file_path() == str(tune_file)
    result = attn.tune(configs=[cfg], budget=1.0, threads=1, decode_batch=2, decode_context=32, prefill_len=8,
                       progress=False)
    assert result["path"] == str(tune_file) and tune_file.exists()
    on_disk = json.loads(tune_file.read_text())
    assert on_disk["fingerprint"] == result["fingerprint"] and on_disk["threads"] == 1
    choices = result["configs"][0]["choices"]
    assert {c["backend"] for c in choices} >= {"cpu_flash"}
    assert any(c["decode_us"] > 0 for c in choices)
    d = attn.select(cfg)
    assert d.tuned and any(n.startswith("measured") for n in d.notes)
    assert d.to_dict()["tuned"] is True
    layer = attn.Attention(cfg)  # runs the measured variant, with the measured block size
    assert layer.variant == d.variant and layer.block_size == d.block_size


def test_tune_needs_a_model_or_configs(tune_file):
    with pytest.raises(attn.Error, match="model"):
        attn.tune()
    with pytest.raises(attn.Error, match="budget"):
        attn.tune(configs=[attn.LayerConfig(**TINY)], budget=0.0, progress=False)
