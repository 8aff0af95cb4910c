import numpy as np, ml_dtypes, attn; rng = np.random.default_rng(0)
cfg = attn.LayerConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16")  # a Llama-3-8B layer
layer = attn.Attention(cfg)                     # the selector picks the backend for this machine
print(layer.decision)                           # the winner, and why every other backend lost
cache = layer.make_cache(num_blocks=8)          # paged KV cache in the backend's layout and block size
blocks = list(range(-(-101 // layer.block_size)))          # this sequence's blocks: 100 cached + 1 new token
rand = lambda *shape: rng.standard_normal(shape).astype(ml_dtypes.bfloat16)  # NumPy bfloat16
prompt = attn.BatchMetadata(context_lens=[0], query_lens=[100], block_ids=[blocks], cache=cache)
layer.write_kv(rand(100, 8, 128), rand(100, 8, 128), cache, prompt)   # the prompt's keys and values
step = attn.BatchMetadata(context_lens=[100], query_lens=[1], block_ids=[blocks], cache=cache)
plan = layer.plan(step, cache)                  # once per step: validates the metadata, plans the work
ws = attn.Workspace(plan.workspace_bytes)       # scratch for run(), reused by every layer and step
out = layer.run(plan, rand(1, 32, 128), cache, k=rand(1, 8, 128), v=rand(1, 8, 128), workspace=ws)
print(plan)                                     # ^ per layer: write this step's k, v, then attend
print(layer.backend, layer.variant, out.shape, out.dtype, out[0, 0, :4])
