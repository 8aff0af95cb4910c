"""Adapters that plug attn into other frameworks: ``attn.integrations.transformers``."""
