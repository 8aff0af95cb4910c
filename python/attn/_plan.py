"""attn.plan: a model's layers (built-in name or config.json) → one Decision per layer."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from . import _core


@dataclass(frozen=True)
class PlannedLayer:
    """One layer of a plan: its config (attention) or mixer type, and the selector's decision."""

    index: int
    kind: str  # "attention" or "mixer"
    decision: _core.Decision
    config: Optional[_core.LayerConfig] = None  # attention layers
    mixer: Optional[str] = None  # mixer layers: mamba1, mamba2, short_conv, ...
    softmax_scale: float = 0.0  # 0 → 1/sqrt(head_size)
    sharding: Optional[_core.HeadSharding] = None  # attention layers: heads per tensor-parallel rank

    @property
    def backend(self) -> str:
        return self.decision.backend


@dataclass
class Plan:
    """Per-layer decisions for a model. ``repr`` groups consecutive layers that decided alike."""

    model: _core.ModelSpec
    layers: list = field(default_factory=list)
    tensor_parallel: int = 1  # layers hold one rank's share when > 1

    def backends(self) -> dict:
        """Backend name → number of layers it serves."""
        counts: dict = {}
        for layer in self.layers:
            counts[layer.backend] = counts.get(layer.backend, 0) + 1
        return counts

    @property
    def ok(self) -> bool:
        """True when every layer has a backend."""
        return all(layer.backend for layer in self.layers)

    def groups(self) -> list:
        """[(indices, PlannedLayer)]: layers with the same kind, config and decision, in first-seen order
        (Gemma's alternating sliding / full layers make two groups, not 42)."""
        out: dict = {}
        for layer in self.layers:
            key = (layer.kind, layer.backend, layer.decision.variant, layer.config, layer.mixer)
            out.setdefault(key, ([], layer))[0].append(layer.index)
        return list(out.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "architecture": self.model.architecture,
            "num_layers": self.model.num_layers,
            "tensor_parallel": self.tensor_parallel,
            "layers": [
                {"index": l.index, "kind": l.kind, "mixer": l.mixer, "softmax_scale": l.softmax_scale,
                 "decision": l.decision.to_dict()}
                for l in self.layers
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        lines = [f"plan for {self.model.name} ({self.model.architecture}, {self.model.num_layers} layers)"]
        if self.tensor_parallel > 1:
            lines[0] += f", one of {self.tensor_parallel} tensor-parallel ranks"
        for indices, layer in self.groups():
            what = layer.mixer if layer.kind == "mixer" else layer.config.kind
            variant = f" [{layer.decision.variant}]" if layer.decision.variant else ""
            chosen = (layer.backend or "no valid backend") + variant
            slow = "  <- slow reference path" if layer.decision.slow_path else ""
            lines.append(f"  {layer.kind:<9} {what:<22} -> {chosen:<28} {_span(indices)}{slow}")
        return "\n".join(lines)


def _span(indices: list) -> str:
    """'layers 0-31', 'layer 5', 'layers 0-40 step 2', or 'layers 1, 4, 9'."""
    if len(indices) == 1:
        return f"layer {indices[0]}"
    steps = {b - a for a, b in zip(indices, indices[1:])}
    if len(steps) == 1:
        step = steps.pop()
        return f"layers {indices[0]}-{indices[-1]}" + (f" step {step}" if step > 1 else "")
    runs, start = [], indices[0]
    for prev, cur in zip(indices, indices[1:] + [None]):
        if cur != prev + 1 if cur is not None else True:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return "layers " + ", ".join(runs)


def plan(model: str, backend: Optional[str] = None, platform: Any = None, *, dtype: Any = None,
         kv_cache_dtype: Any = None, block_size: int = 0, tensor_parallel: int = 1) -> Plan:
    """Loads ``model`` (a built-in name such as "llama-3.1-8b", or a config.json path / folder) and
    selects a backend for every layer on ``platform`` (default: this CPU; or e.g. "cuda:9.0").

    ``backend`` forces the attention backend (an error names the layers it cannot serve);
    dtype / kv_cache_dtype / block_size override what the config says. ``tensor_parallel`` plans one
    rank's share of every layer (heads split as vLLM splits them; heads that do not divide raise).
    """
    whole = _core.load_model(model, dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size)
    spec = _core.shard_model(whole, tensor_parallel)
    result = Plan(model=spec, tensor_parallel=tensor_parallel)
    for layer, whole_layer in zip(spec.layers, whole.layers):
        if layer.kind == "mixer":
            decision = _core.select_mamba(layer.mixer, platform=platform)
            result.layers.append(PlannedLayer(layer.index, "mixer", decision, mixer=layer.mixer))
        else:
            try:
                # Unforced, a layer nothing serves stays in the plan (backend "", every reason kept);
                # a forced backend that cannot serve a layer is an error, as in select().
                decide = _core.select if backend else _core.explain
                decision = decide(layer.attention, backend, platform)
            except _core.Error as e:
                raise _core.Error(f"{spec.name} layer {layer.index}: {e}") from None
            sharding = _core.shard_heads(whole_layer.attention, tensor_parallel)
            result.layers.append(PlannedLayer(layer.index, "attention", decision, config=layer.attention,
                                              softmax_scale=layer.softmax_scale, sharding=sharding))
    return result
