"""attn as a Hugging Face transformers attention implementation.

    import attn.integrations.transformers          # registers "attn"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="attn")
    model.generate(...)                            # runs on an AttnCache: attn's paged caches

`generate` on such a model uses an AttnCache (transformers_cache.py): each layer's new K/V go
straight into attn's paged cache inside the kernel call, with one plan per step; nothing is
copied per call. An AttnCache can also be passed explicitly (`cache=AttnCache()`). Calls with
another cache (a DynamicCache a model made for itself, a StaticCache) get the dense path: the
concatenated K/V are attended through attn.attention, one copy into a paged cache per call.
Grouped K/V heads, sliding windows (Mistral, Gemma-2), logit soft-capping (Gemma-2) and sinks
(gpt-oss) are passed through. Masks come in flash-attention form: None when only causal, else the
2-D padding mask; padded tokens are never written or attended. attn computes forward passes only
(inference): a call that needs gradients or dropout goes to transformers' "sdpa" (an error on an
AttnCache, whose past K/V live in attn's cache).
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerationMixin

from .. import Error
from ..dense import _attention as attention  # bottom-right causal: decode against a longer context
from .transformers_cache import AttnCache, cache_for

NAME = "attn"
__all__ = ["AttnCache", "NAME", "register"]


def attn_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                           is_causal: bool | None = None, sliding_window: int | None = None,
                           softcap: float | None = None, s_aux: torch.Tensor | None = None, **kwargs):
    """transformers' attention signature: query [B, H, Sq, D], key / value [B, Hkv, Skv, D] →
    ([B, Sq, H, Dv], None). Attention weights are never materialized."""
    paged = cache_for(key)
    needs_grad = (dropout and module.training) or (torch.is_grad_enabled() and query.requires_grad)
    if paged is not None:
        if needs_grad:
            raise Error("attention on an AttnCache with gradients or dropout invalid: expected inference "
                        "(torch.no_grad(), model.eval()); train with another cache or none")
        out = paged.attend(module, query, key, value, attention_mask, scaling, sliding_window, softcap, s_aux)
        return out, None
    if needs_grad:
        # sdpa wants a 4-D mask; this implementation's masks are 2-D padding masks or None.
        mask = None if attention_mask is None else _sdpa_mask(attention_mask, query, key)
        return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    options = dict(causal=causal, scale=scaling, window=sliding_window, softcap=softcap,
                   sinks=None if s_aux is None else s_aux.detach().float().tolist())
    if attention_mask is None:
        return attention(query, key, value, layout="bhsd", **options).transpose(1, 2), None
    # Padded batch: keep each sequence's valid tokens (the mask's last Sq columns are the queries).
    kv_valid = attention_mask[:, -key.shape[2]:].bool()
    q_valid = kv_valid[:, -query.shape[2]:]
    cu = lambda valid: torch.nn.functional.pad(valid.sum(1).cumsum(0), (1, 0)).tolist()  # noqa: E731
    out = attention(query.transpose(1, 2)[q_valid], key.transpose(1, 2)[kv_valid], value.transpose(1, 2)[kv_valid],
                    layout="thd", cu_seqlens_q=cu(q_valid), cu_seqlens_k=cu(kv_valid), **options)
    full = out.new_zeros((query.shape[0], query.shape[2], query.shape[1], out.shape[-1]))
    full[q_valid] = out
    return full, None


def _sdpa_mask(padding: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """[B, Skv] padding mask → the boolean [B, 1, Sq, Skv] causal-and-padding mask sdpa takes."""
    sq, skv = query.shape[2], key.shape[2]
    causal = torch.ones(sq, skv, dtype=torch.bool, device=query.device).tril(skv - sq)
    return causal[None, None] & padding[:, None, None, -skv:].bool()


_prepare_cache = GenerationMixin._prepare_cache_for_generation
_names: set[str] = set()


def _prepare_attn_cache(self, generation_config, model_kwargs, *args, **kwargs):
    """generate's cache set-up: where it made its default DynamicCache for a model that runs attn,
    an AttnCache takes its place (a cache the caller passed, or a cache_implementation, stay)."""
    result = _prepare_cache(self, generation_config, model_kwargs, *args, **kwargs)
    for arg in ("cache", "past_key_values"):
        made = model_kwargs.get(arg)
        if (type(made) is DynamicCache and not getattr(made, "_is_user_defined", False)
                and getattr(self.config, "_attn_implementation", None) in _names):
            model_kwargs[arg] = AttnCache(self.config)
    return result


def register(name: str = NAME) -> str:
    """Registers attn under `name` (default "attn") with transformers; returns the name."""
    AttentionInterface.register(name, attn_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, flash_attention_mask)
    _names.add(name)
    GenerationMixin._prepare_cache_for_generation = _prepare_attn_cache
    return name


register()
