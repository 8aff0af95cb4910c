"""Python threads run layers concurrently (the GIL is released inside kernels) with results
bitwise equal to one thread's."""
import threading

import numpy as np

import attn
from helpers import filled_step, make_batch, valid_cpu_backends

CFG = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="float32")


def run_threads(fn, n):
    errors = []

    def body(i):
        try:
            fn(i)
        except BaseException as e:  # surfaced in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_distinct_layers_in_parallel_threads():
    rng = np.random.default_rng(11)
    batches = [make_batch(rng, attn.Attention(CFG, backend), [50, 3], [1, 9])
               for backend in valid_cpu_backends(CFG) for _ in range(2)]
    expected = [b.layer.forward(b.q, b.cache, b.md) for b in batches]
    outs = [np.empty_like(e) for e in expected]

    def work(i):
        b = batches[i]
        for _ in range(20):
            b.layer.forward(b.q, b.cache, b.md, out=outs[i])
            np.testing.assert_array_equal(outs[i], expected[i])

    run_threads(work, len(batches))


def test_one_layer_shared_by_threads():
    rng = np.random.default_rng(12)
    b = make_batch(rng, attn.Attention(CFG), [30, 0, 64], [1, 12, 1])
    expected = b.layer.forward(b.q, b.cache, b.md)

    def work(i):
        out = np.empty_like(expected)
        for _ in range(20):
            b.layer.forward(b.q, b.cache, b.md, out=out)
            np.testing.assert_array_equal(out, expected)

    run_threads(work, 4)


def test_selection_from_many_threads_agrees():
    configs = [CFG.replace(head_size=h) for h in (32, 64, 128)]
    want = {c.head_size: attn.select(c).backend for c in configs}

    def work(i):
        for _ in range(50):
            c = configs[i % 3]
            assert attn.select(c).backend == want[c.head_size]

    run_threads(work, 6)


def test_two_threads_run_two_layers_under_one_plan():
    """A decode step the way an engine runs it: plan once, then layers on two threads at once,
    each thread with its own Workspace; every run gives the bits of a serial forward."""
    rng = np.random.default_rng(13)
    steps = []
    for i in range(2):
        b = filled_step(attn.Attention(CFG, scale=0.2 + 0.1 * i), rng, [60, 3, 200, 1], [1, 1, 1, 1])
        b.q = rng.standard_normal((b.md.num_tokens, CFG.num_heads, CFG.head_size)).astype(np.float32)
        steps.append(b)
    expected = [b.layer.forward(b.q, b.cache, b.md) for b in steps]
    plan = steps[0].layer.plan(steps[0].md, steps[0].cache)

    def work(i):
        b, ws = steps[i], attn.Workspace(plan.workspace_bytes)
        out = np.empty_like(expected[i])
        for _ in range(50):
            b.layer.run(plan, b.q, b.cache, out, workspace=ws)
            np.testing.assert_array_equal(out, expected[i])

    run_threads(work, 2)


def test_a_workspace_in_use_is_refused_not_raced():
    b = filled_step(attn.Attention(CFG), np.random.default_rng(14), [900, 700], [1, 1])
    b.q = np.random.default_rng(15).standard_normal((2, CFG.num_heads, CFG.head_size)).astype(np.float32)
    plan = b.layer.plan(b.md, b.cache)
    ws = attn.Workspace(plan.workspace_bytes)
    expected = b.layer.forward(b.q, b.cache, b.md)

    def work(i):
        out = np.empty_like(expected)
        for _ in range(200):
            try:
                b.layer.run(plan, b.q, b.cache, out, workspace=ws)
            except attn.Error as e:  # the other thread holds the workspace
                assert "in use by another run" in str(e)
                continue
            np.testing.assert_array_equal(out, expected)  # no run saw the other's scratch

    run_threads(work, 2)
