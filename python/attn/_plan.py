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
    """Per-layer decisions for a model, from the library's plan (equal layers grouped, one decision
    per group). ``repr`` lists the groups with their layer ranges ("0-31", "0,2,4,...,40")."""

    model: _core.ModelSpec
    layers: list = field(default_factory=list)
    tensor_parallel: int = 1  # layers hold one rank's share when > 1
    core: Optional[_core.ModelPlan] = None  # the library's plan the layers come from

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
        """[(indices, PlannedLayer)]: the library's groups of equal layers, in first-seen order
        (Gemma's alternating sliding / full layers make two groups, not 42)."""
        return [(list(g.layers), self.layers[g.layers[0]]) for g in self.core.groups]

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
            "groups": self.core.to_dict()["groups"],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        lines = [f"plan for {self.model.name} ({self.model.architecture}, {self.model.num_layers} layers)"]
        if self.tensor_parallel > 1:
            lines[0] += f", one of {self.tensor_parallel} tensor-parallel ranks"
        for group in self.core.groups:
            layer = self.layers[group.layers[0]]
            what = layer.mixer if layer.kind == "mixer" else layer.config.kind
            variant = f" [{layer.decision.variant}]" if layer.decision.variant else ""
            chosen = (layer.backend or "no valid backend") + variant
            slow = "  <- slow reference path" if layer.decision.slow_path else ""
            lines.append(f"  {layer.kind:<9} {what:<22} -> {chosen:<28} layers {group.layer_ranges}{slow}")
        return "\n".join(lines)


def plan(model: str, backend: Optional[str] = None, platform: Any = None, *, dtype: Any = None,
         kv_cache_dtype: Any = None, block_size: int = 0, tensor_parallel: int = 1) -> Plan:
    """Loads ``model`` (a built-in name such as "llama-3.1-8b", or a config.json path / folder) and
    selects a backend for every layer on ``platform`` (default: this CPU; or e.g. "cuda:9.0").

    ``backend`` forces the attention backend (an error names the layers it cannot serve);
    dtype / kv_cache_dtype / block_size override what the config says. ``tensor_parallel`` plans one
    rank's share of every layer (heads split as vLLM splits them; heads that do not divide raise).
    A layer nothing serves stays in the plan (backend "", every candidate's reasons kept).
    """
    whole = _core.load_model(model, dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size)
    core = _core.plan_model(whole, platform, backend=backend, tensor_parallel=tensor_parallel)
    spec = core.rank_model
    layers: list = [None] * spec.num_layers
    for group in core.groups:
        for index in group.layers:
            layer = spec.layers[index]
            if group.kind == "mixer":
                layers[index] = PlannedLayer(index, "mixer", group.decision, mixer=layer.mixer)
            else:
                layers[index] = PlannedLayer(index, "attention", group.decision, config=layer.attention,
                                             softmax_scale=layer.softmax_scale, sharding=group.sharding)
    return Plan(model=spec, layers=layers, tensor_parallel=tensor_parallel, core=core)
