"""Times the reference target at a realistic size (issue 2): not a test, a printed table.

    python benchmarks/bench_reference.py
"""

from __future__ import annotations

import time

import numpy as np

import gradc
from gradc import ops


def timed(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    shape = (32, 64, 56, 56)
    x = rng.standard_normal(shape, dtype=np.float32)
    cases = []

    g = gradc.Graph("pool")
    xv = g.input("x", "float32", shape)
    dyv = g.input("dy", "float32", (32, 64, 28, 28))
    g.output(ops.max_pooling_grad(xv, dyv, (3, 3), (2, 2), (1, 1), (1, 1)), "dx")
    dy = rng.standard_normal((32, 64, 28, 28), dtype=np.float32)
    cases.append(("max_pooling_grad 3x3 s2 p1", g, dict(x=x, dy=dy)))

    for mode in ("linear", "nearest"):
        g = gradc.Graph("rs")
        dyv = g.input("dy", "float32", (32, 64, 112, 112))
        g.output(ops.resample_grad(dyv, shape, (1, 1, 2, 2), mode), "dx")
        dy2 = rng.standard_normal((32, 64, 112, 112), dtype=np.float32)
        cases.append((f"resample_grad {mode} 2x (dy 32x64x112x112)", g, dict(dy=dy2)))

    g = gradc.Graph("rsd")
    dyv = g.input("dy", "float32", (32, 64, 28, 28))
    g.output(ops.resample_grad(dyv, shape, (1, 1, 0.5, 0.5), "linear"), "dx")
    cases.append(("resample_grad linear 0.5x (dy 32x64x28x28)", g, dict(dy=dy)))

    print(f"{'case (float32, input 32x64x56x56)':48} {'median s':>10} {'min s':>10}")
    for name, g, feeds in cases:
        ex = gradc.compile(g, target="reference", passes=None)
        med, best = timed(lambda: ex(**feeds))
        print(f"{name:48} {med:10.2f} {best:10.2f}")


if __name__ == "__main__":
    main()
