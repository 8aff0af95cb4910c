"""AttnCache: a transformers `Cache` whose layers are attn's own paged KV caches.

Each attention layer owns one attn.KVCache (its backend's layout, dtype and block size); the
sequences' block tables are shared by all layers, as in vLLM's KV-cache groups. A step's new K/V
go straight into their slots inside the kernel call (Attention.run with k= / v=): nothing is
concatenated or copied per call, and one plan per step serves every layer of a config.

Sequences keep only their valid tokens: padding (attention mask 0) is never written, so each
sequence's context length is its own. Blocks are reference-counted so beam search (reorder_cache),
batch expansion and selection share blocks instead of copying them; a shared block is copied
(in every layer) the first time a sequence appends into it. Capacity grows by doubling.
"""
from __future__ import annotations

import math
import threading

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import attn

# The cache whose update() returned `key` last, per thread: how the attention function finds it.
_last_update = threading.local()


def cache_for(key: torch.Tensor) -> "AttnCache | None":
    """The AttnCache whose update() just returned `key` (the attention call of that layer), else None."""
    if getattr(_last_update, "key", None) is key:
        return _last_update.cache
    return None


class _Layer(CacheLayerMixin):
    """One attention layer's view of the shared state (what transformers' mask code asks)."""

    is_sliding = False
    is_croppable = True

    def __init__(self, owner: "AttnCache"):
        super().__init__()
        self._owner = owner

    def lazy_initialization(self, key_states, value_states) -> None:
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        return key_states, value_states

    def get_seq_length(self) -> int:
        return self._owner._positions

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._owner._positions + query_length, 0

    def get_max_length(self) -> int:
        return -1

    # The per-layer hooks are no-ops: AttnCache does each operation once for all layers.
    def reset(self) -> None: ...
    def crop(self, tokens_to_remove: int) -> None: ...
    def reorder_cache(self, beam_idx) -> None: ...
    def batch_repeat_interleave(self, repeats: int) -> None: ...
    def batch_select_indices(self, indices) -> None: ...


class _AttnLayer:
    """A model layer served by attn: its Attention (config, scale, sinks) and its paged cache.
    `make(num_threads)` builds the layer's Attention again with another thread count."""

    def __init__(self, make, num_threads: int):
        self.make = make
        self.layer = make(num_threads)
        self.cache: attn.KVCache | None = None
        self.decode_out: torch.Tensor | None = None  # reused by every decode step (o_proj consumes it at once)


class _Step:
    """One forward pass over the model: its metadata, plans and which layers already ran."""

    def __init__(self, metadata: attn.BatchMetadata, valid: torch.Tensor | None):
        self.metadata = metadata
        self.valid = valid  # [B, Sq] bool of the tokens written and attended; None = all
        self.plans = attn.StepPlans(metadata)  # one plan per layer group, shared by its layers
        self.done: set[int] = set()


class AttnCache(Cache):
    """A transformers Cache backed by attn paged caches. Pass it as `cache=` / `past_key_values=`
    to a model loaded with attn_implementation="attn"; `generate` makes one by itself there.

    num_threads: threads per kernel call (0: OpenMP's default). backend: force an attn backend.
    """

    def __init__(self, config=None, *, num_threads: int = 0, backend: str | None = None, **_):
        super().__init__(layers=[])
        self._num_threads, self._backend = num_threads, backend
        self._workspace = attn.Workspace()
        self._layers: dict[int, _AttnLayer] = {}
        self._block_size = 0
        self._capacity = 0
        self._refs: list[int] = []  # per block: how many sequences' tables hold it
        self._free: list[int] = []
        self._reset_sequences()

    def _reset_sequences(self) -> None:
        self._positions = 0          # padded positions seen: transformers' sequence length
        self._lens: list[int] = []   # per sequence: valid tokens cached
        self._tables: list[list[int]] = []
        self._step: _Step | None = None
        self._free = list(range(self._capacity))[::-1]
        self._refs = [0] * self._capacity

    # --- transformers' Cache interface ---
    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        while len(self.layers) <= layer_idx:
            self.layers.append(_Layer(self))
        self.layers[layer_idx].is_initialized = True
        _last_update.key, _last_update.cache = key_states, self
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._positions

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._positions + query_length, 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1

    @property
    def is_compileable(self) -> bool:
        return False

    def reset(self) -> None:
        self._reset_sequences()

    def crop(self, tokens_to_remove: int) -> None:
        """Drops the last tokens (a negative count, transformers' convention; a positive value is
        the length to keep, the legacy form)."""
        keep = self._positions + tokens_to_remove if tokens_to_remove <= 0 else min(tokens_to_remove, self._positions)
        drop = self._positions - keep
        if drop <= 0:
            return
        self._positions = keep
        for s, n in enumerate(self._lens):
            self._lens[s] = max(0, n - drop)  # the last positions are generated tokens: valid in every sequence
            self._shrink(s)
        self._step = None

    def reorder_cache(self, beam_idx) -> None:
        self._select([int(i) for i in torch.as_tensor(beam_idx).tolist()])

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._select([s for s in range(len(self._lens)) for _ in range(repeats)])

    def batch_select_indices(self, indices) -> None:
        self._select([int(i) for i in torch.as_tensor(indices).tolist()])

    # --- what attn adds ---
    @property
    def num_threads(self) -> int:
        """Threads per kernel call (0: OpenMP's default)."""
        return self._num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        """From the next kernel call on, every layer runs with `n` threads (0: OpenMP's default)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise attn.Error(f"num_threads={n!r} invalid: expected an int >= 0 (0: OpenMP's default)")
        self._num_threads = n
        for served in self._layers.values():
            served.layer = served.make(n)  # the step's plans are kept per thread count

    @property
    def memory_bytes(self) -> int:
        """Bytes of KV cache held, all layers."""
        return sum(l.cache.nbytes for l in self._layers.values())

    @property
    def blocks_in_use(self) -> int:
        return sum(1 for r in self._refs if r > 0)

    def attend(self, module, query, key, value, attention_mask, scaling, sliding_window, softcap, s_aux):
        """One layer's attention on this cache: query [B, H, Sq, D], key / value [B, Hkv, Sq, D]
        (this step's new tokens) → [B, Sq, H, Dv]."""
        layer_idx = module.layer_idx
        served = self._layers.get(layer_idx) or self._add_layer(layer_idx, query, key, value, scaling, sliding_window,
                                                                softcap, s_aux)
        if self._step is None or layer_idx in self._step.done:
            self._begin_step(query.shape[0], query.shape[2], attention_mask)
        step = self._step
        step.done.add(layer_idx)
        plan = step.plans.for_layer(served.layer, served.cache)
        b, h, sq, d = query.shape
        tokens = lambda x: x.transpose(1, 2).reshape(b * sq, x.shape[1], x.shape[3])  # noqa: E731 (a view when it can be)
        if step.valid is None:
            out = None
            if sq == 1:  # decode: one output buffer per layer, no allocation per call
                out = served.decode_out
                if out is None or out.shape != (b, h, value.shape[3]) or out.dtype != query.dtype:
                    out = served.decode_out = query.new_empty((b, h, value.shape[3]))
            out = served.layer.run(plan, tokens(query), served.cache, out, k=tokens(key), v=tokens(value),
                                   workspace=self._workspace)
            return out.view(b, sq, h, out.shape[-1])
        valid = step.valid
        pick = lambda x: x.transpose(1, 2)[valid]  # noqa: E731
        out = served.layer.run(plan, pick(query), served.cache, k=pick(key), v=pick(value), workspace=self._workspace)
        full = out.new_zeros((b, sq, h, out.shape[-1]))
        full[valid] = out
        return full

    # --- internals ---
    def _add_layer(self, layer_idx, query, key, value, scaling, sliding_window, softcap, s_aux) -> _AttnLayer:
        dtype = str(query.dtype).removeprefix("torch.")
        cfg = attn.LayerConfig(num_heads=query.shape[1], num_kv_heads=key.shape[1], head_size=query.shape[3],
                               head_size_v=value.shape[3], dtype=dtype, sliding_window=sliding_window or 0,
                               logits_soft_cap=softcap or 0.0, has_sink=s_aux is not None)
        sinks = None if s_aux is None else s_aux.detach().float().tolist()
        backend = self._backend
        served = _AttnLayer(lambda n: attn.Attention(cfg, backend, scale=scaling, sinks=sinks, num_threads=n),
                            self._num_threads)
        layer = served.layer
        if self._block_size and layer.block_size != self._block_size:
            raise attn.Error(f"layer {layer_idx}: block_size={layer.block_size} invalid: expected {self._block_size}, "
                             "the block size of this cache's other layers (one block table serves every layer)")
        self._block_size = layer.block_size  # the first layer's backend fixes it for the table
        # Before the first step there are no blocks yet: a one-block cache that the step's allocation resizes.
        served.cache = layer.make_cache(num_blocks=max(1, self._capacity))
        self._layers[layer_idx] = served
        return served

    def _begin_step(self, batch: int, query_len: int, attention_mask) -> None:
        if not self._lens:
            self._lens = [0] * batch
            self._tables = [[] for _ in range(batch)]
        if len(self._lens) != batch:
            raise attn.Error(f"query batch={batch} invalid: expected this cache's {len(self._lens)} sequences "
                             "(reset() the cache for a new batch)")
        valid = None
        if attention_mask is not None:
            mask = attention_mask[:, -query_len:].bool()
            if not bool(mask.all()):
                valid = mask
            new = mask.sum(1).tolist()
        else:
            new = [query_len] * batch
        self._positions += query_len
        ctx = list(self._lens)
        for s in range(batch):
            self._grow(s, ctx[s] + new[s])
            self._lens[s] = ctx[s] + new[s]
        md = attn.BatchMetadata(context_lens=ctx, query_lens=new, block_ids=self._tables, block_size=self._block_size,
                                num_blocks=self._capacity)
        self._step = _Step(md, valid)

    def _grow(self, s: int, length: int) -> None:
        """Blocks for `length` tokens of sequence s; a shared last block is copied before it is appended to."""
        table, bs = self._tables[s], self._block_size
        if table and self._lens[s] % bs and self._refs[table[-1]] > 1 and length > self._lens[s]:
            fresh = self._allocate()
            for served in self._layers.values():
                served.cache.copy_block(table[-1], fresh)
            self._refs[table[-1]] -= 1
            table[-1] = fresh
        while len(table) < max(1, math.ceil(length / bs)):
            table.append(self._allocate())

    def _allocate(self) -> int:
        if not self._free:
            self._resize(max(16, 2 * self._capacity))
        block = self._free.pop()
        self._refs[block] = 1
        return block

    def _resize(self, capacity: int) -> None:
        for served in self._layers.values():
            bigger = served.layer.make_cache(num_blocks=capacity)
            kept = min(self._capacity, served.cache.num_blocks)
            bigger.numpy()[:kept] = served.cache.numpy()[:kept]
            served.cache = bigger
        self._free = list(range(capacity - 1, self._capacity - 1, -1)) + self._free
        self._refs += [0] * (capacity - self._capacity)
        self._capacity = capacity

    def _shrink(self, s: int) -> None:
        table = self._tables[s]
        keep = math.ceil(self._lens[s] / self._block_size) if self._block_size else 0
        while len(table) > keep:
            self._release(table.pop())

    def _release(self, block: int) -> None:
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free.append(block)

    def _select(self, rows: list[int]) -> None:
        """Sequence i becomes old sequence rows[i] (beam reorder, expansion, selection): tables are
        shared, never copied; blocks of dropped sequences return to the pool."""
        if not self._lens:
            return
        tables = [list(self._tables[r]) for r in rows]
        for t in tables:
            for b in t:
                self._refs[b] += 1
        for t in self._tables:
            for b in t:
                self._release(b)
        self._tables, self._lens = tables, [self._lens[r] for r in rows]
        self._step = None
