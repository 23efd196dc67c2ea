"""Times gradc's C kernels of a transformer's layer norm and embedding against PyTorch.

    python benchmarks/bench_normalization.py [--threads 1,2] [--rounds 30] [--shape 8,128,256]
        [--vocab 4096]

In one process and on the same arrays: ``mean_variance_normalization`` forward and its
gradient (GPT-sized: batch x context x width, float32, normalized over the width, scale and
bias of the width) against ``torch.nn.functional.layer_norm`` and its autograd backward;
``gather`` (the token embedding) and ``gather_grad`` (its gradient) against
``torch.nn.functional.embedding`` and its backward. Every gradc result is checked first (bit
for bit against gradc's reference target, and against PyTorch within §24.4's bound for layer
norm, bit for bit for the embedding). The peers are timed in interleaved rounds of 10 calls (a
drift of the machine's load reaches them alike); the table gives each one's median and best
round, and PyTorch's median over gradc's. A gradc call includes the Executable's checks of its
arrays (about 15-25 us here); "runner only" calls the compiled program's runner directly (the
C call, its fresh output arrays, no checks: what a Trainer step pays per kernel inside one C
program is less still). PyTorch's forward is called without autograd, its backward
through ``torch.autograd.grad`` on a retained graph. Markdown goes to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import numpy as np

import gradc
from gradc import ops

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from normalization_bound import assert_within, backward_bounds, forward_bound  # noqa: E402


def _layer_norm(shape: tuple[int, ...], threads: int) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    c = shape[-1]
    x = (rng.standard_normal(shape) + 0.5).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    s, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    g = gradc.Graph("layer_norm")
    X, S, B = g.input("x", "float32", shape), g.input("s", "float32", (c,)), \
        g.input("b", "float32", (c,))
    g.output(ops.mean_variance_normalization(X, S, B), "y")
    gg = gradc.Graph("layer_norm_grad")
    X, D, S = gg.input("x", "float32", shape), gg.input("dy", "float32", shape), \
        gg.input("s", "float32", (c,))
    for name, v in zip(("dx", "ds", "db"), ops.mean_variance_normalization_grad(X, D, S)):
        gg.output(v, name)
    fwd, bwd = gradc.compile(g, target="c", threads=threads), \
        gradc.compile(gg, target="c", threads=threads)
    want = gradc.compile(g, target="reference")(x=x, s=s, b=b)["y"]
    assert fwd(x=x, s=s, b=b)["y"].tobytes() == want.tobytes()
    wgrad = gradc.compile(gg, target="reference")(x=x, dy=dy, s=s)
    got = bwd(x=x, dy=dy, s=s)
    assert all(got[k].tobytes() == wgrad[k].tobytes() for k in wgrad)
    tx, ts, tb = (torch.tensor(a, requires_grad=True) for a in (x, s, b))
    ty = F.layer_norm(tx, (c,), ts, tb, 1e-5)
    assert_within(ty.detach().numpy(), want, forward_bound(x, s, b, (len(shape) - 1,)))
    tgrads = torch.autograd.grad(ty, (tx, ts, tb), torch.tensor(dy), retain_graph=True)
    for t, k, bound in zip(tgrads, ("dx", "ds", "db"),
                           backward_bounds(x, dy, s, (len(shape) - 1,))):
        assert_within(t.numpy(), wgrad[k], bound, k)
    return {
        "layer norm forward": lambda: fwd(x=x, s=s, b=b),
        "layer norm forward (runner)": lambda: fwd._runner({"x": x, "s": s, "b": b}, {}),
        "layer norm forward (torch)": lambda: F.layer_norm(tx.detach(), (c,), ts.detach(),
                                                           tb.detach(), 1e-5),
        "layer norm backward": lambda: bwd(x=x, dy=dy, s=s),
        "layer norm backward (runner)": lambda: bwd._runner({"x": x, "dy": dy, "s": s}, {}),
        "layer norm backward (torch)": lambda: torch.autograd.grad(
            ty, (tx, ts, tb), torch.tensor(dy), retain_graph=True),
    }


def _embedding(shape: tuple[int, ...], vocab: int, threads: int) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(1)
    n, t, c = shape
    ids = rng.integers(0, vocab, (n, t))
    w = rng.standard_normal((vocab, c)).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    g = gradc.Graph("embedding")
    g.output(ops.gather(g.input("w", "float32", (vocab, c)), g.input("ids", "int64", (n, t))),
             "y")
    gg = gradc.Graph("embedding_grad")
    gg.output(ops.gather_grad(gg.input("dy", "float32", shape), gg.input("ids", "int64", (n, t)),
                              (vocab, c)), "dw")
    fwd, bwd = gradc.compile(g, target="c", threads=threads), \
        gradc.compile(gg, target="c", threads=threads)
    tw = torch.tensor(w, requires_grad=True)
    tids = torch.tensor(ids)
    ty = F.embedding(tids, tw)
    assert fwd(w=w, ids=ids)["y"].tobytes() == ty.detach().numpy().tobytes()
    (dw,) = torch.autograd.grad(ty, (tw,), torch.tensor(dy), retain_graph=True)
    assert bwd(dy=dy, ids=ids)["dw"].tobytes() == dw.numpy().tobytes()
    return {
        "embedding forward": lambda: fwd(w=w, ids=ids),
        "embedding forward (runner)": lambda: fwd._runner({"w": w, "ids": ids}, {}),
        "embedding forward (torch)": lambda: F.embedding(tids, tw.detach()),
        "embedding backward": lambda: bwd(dy=dy, ids=ids),
        "embedding backward (runner)": lambda: bwd._runner({"dy": dy, "ids": ids}, {}),
        "embedding backward (torch)": lambda: torch.autograd.grad(
            ty, (tw,), torch.tensor(dy), retain_graph=True),
    }


def interleaved(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call, one entry per round of 10 calls, the cases in turn."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    for f in cases.values():
        f()
    for _ in range(rounds):
        for k, f in cases.items():
            t0 = time.perf_counter()
            for _ in range(10):
                f()
            times[k].append((time.perf_counter() - t0) / 10)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--shape", default="8,128,256")
    ap.add_argument("--vocab", type=int, default=4096)
    a = ap.parse_args()
    shape = tuple(int(v) for v in a.shape.split(","))
    print(f"shape {'x'.join(map(str, shape))} float32, vocabulary {a.vocab}; "
          f"ms per call (median / best round of 10 calls), {a.rounds} interleaved rounds\n")
    print("| threads | kernel | gradc C | gradc C, runner only | PyTorch | PyTorch / gradc | "
          "PyTorch / runner |")
    print("|---|---|---|---|---|---|---|")
    for threads in (int(v) for v in a.threads.split(",")):
        torch.set_num_threads(threads)
        cases = {**_layer_norm(shape, threads), **_embedding(shape, a.vocab, threads)}
        times = interleaved(cases, a.rounds)
        for k in [k for k in cases if not k.endswith(")")]:
            mine, peer = np.array(times[k]) * 1e3, np.array(times[f"{k} (torch)"]) * 1e3
            raw = np.array(times[f"{k} (runner)"]) * 1e3
            print(f"| {threads} | {k} | {np.median(mine):.4f} / {mine.min():.4f} | "
                  f"{np.median(raw):.4f} / {raw.min():.4f} | "
                  f"{np.median(peer):.4f} / {peer.min():.4f} | "
                  f"{np.median(peer) / np.median(mine):.2f}x | "
                  f"{np.median(peer) / np.median(raw):.2f}x |")


if __name__ == "__main__":
    main()
