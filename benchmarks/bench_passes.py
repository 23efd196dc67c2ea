"""Compile-time cost of the default pass pipeline on generated gradient graphs of growing size.

    python benchmarks/bench_passes.py [--sizes 1000,10000,100000] [--repeat 3]

Prints, per graph size, the median time of the whole ``gradc.optimize`` call (passes, the
verification of the input and of each changed result, statistics), the same without the
verification, microseconds per node (a flat column means linear cost), and each pass's time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import gradc
from gradc import ops

A = ("N", 4, 8, 8)
B = ("N", 4, 4, 4)
WINDOW = dict(input_window_offsets=(0, 0, 0, 1), input_window_sizes=("N", 4, 8, 7),
              input_window_strides=(1, 1, 2, 2))


def block(x: gradc.Value, w: gradc.Value, dy: gradc.Value) -> gradc.Value:
    """One layer's worth of gradient code (about 16 nodes), A-shaped in and out."""
    g = ops.relu_grad(ops.relu(x), dy)            # canonicalize: relu-grad-of-relu
    g = ops.relu_grad(x, g)                       # canonicalize: relu-grad-twice
    g = ops.clip_grad(x, g, -1.0, 6.0)
    t = ops.mul(ops.slice(g, **WINDOW), w)        # A -> B, elementwise
    u = ops.resample_grad(t, A, scales=(1.0, 1.0, 0.5, 0.5))
    v = ops.slice_grad(ops.neg(t), A, **WINDOW)   # prologue
    p = ops.max_pooling_grad(x, ops.add(t, t), window_size=(2, 2), strides=(2, 2))
    dup = ops.max_pooling_grad(x, ops.add(t, t), window_size=(2, 2), strides=(2, 2))  # cse
    return ops.add(ops.add(u, v), ops.mul(ops.add(p, dup), x))


def make_graph(n_nodes: int) -> gradc.Graph:
    """A chain of ``block``s with about ``n_nodes`` nodes."""
    g = gradc.Graph(f"grad_{n_nodes}")
    x = g.input("x", "float32", A)
    w = g.input("w", "float32", B)
    dy = g.input("dy", "float32", A)
    with g:
        while len(g.nodes) < n_nodes:
            dy = block(x, w, dy)
    g.output(dy, "dx")
    return g


def run(sizes: list[int], repeat: int) -> None:
    """Time the default pipeline on each size and print the table."""
    print(f"{'nodes':>8} {'after':>7} {'total s':>9} {'us/node':>8} {'no-verify s':>11} "
          f"{'us/node':>8}  per pass (s)")
    for n in sizes:
        g = make_graph(n)
        times, bare, per_pass = [], [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            opt = gradc.optimize(g, "default")
            times.append(time.perf_counter() - t0)
            per_pass.append([e.seconds for e in opt.report])
            t0 = time.perf_counter()
            gradc.optimize(g, "default", verify_each=False)
            bare.append(time.perf_counter() - t0)
        total, quick = statistics.median(times), statistics.median(bare)
        cols = " ".join(f"{e.name}={statistics.median(p[i] for p in per_pass):.3f}"
                        for i, e in enumerate(opt.report))
        print(f"{len(g.nodes):>8} {len(opt.graph.nodes):>7} {total:>9.3f} "
              f"{1e6 * total / len(g.nodes):>8.1f} {quick:>11.3f} "
              f"{1e6 * quick / len(g.nodes):>8.1f}  {cols}")
        sys.stdout.flush()


def main() -> None:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    run([int(s) for s in args.sizes.split(",")], args.repeat)


if __name__ == "__main__":
    main()
