"""Times single convolution layers on the C target: forward, input gradient (the backward
direction) and filter gradient, with GFLOP/s, from the kernel profile.

    python benchmarks/bench_conv_layers.py [--threads 2] [--repeats 20] [--set resnet18|unet|all]

Each layer is one graph with three outputs (y, dx, dw) compiled with ``profile=True``; after 3
untimed calls, ``--repeats`` calls are profiled and each kernel's mean time is printed with its
GFLOP/s (2 * N * Cout * output positions * Cin * taps, the same count for all three kernels).
The shapes are resnet18's 3x3 layers at 64x64 input (batch 8) and the UNet's 16- and 32-channel
layers. Times are of one process on a shared machine: compare kernels within a run.
"""

from __future__ import annotations

import argparse

import numpy as np

import gradc
from gradc import ops

SETS = {
    "resnet18": [(8, 64, 16, 64), (8, 128, 8, 128), (8, 256, 4, 256), (8, 512, 2, 512),
                 (8, 128, 16, 128, 3, 2)],
    "unet": [(8, 3, 64, 16), (8, 16, 64, 16), (8, 32, 64, 16), (8, 16, 32, 32), (8, 32, 32, 32)],
    # squeezenet1_0's 3x3 expand layers at 3x64x64 (squeeze -> expand channels)
    "squeezenet": [(8, 16, 14, 64), (8, 32, 14, 128), (8, 48, 7, 192), (8, 64, 7, 256),
                   (8, 64, 3, 256)],
}


def bench(n: int, c: int, hw: int, co: int, k: int = 3, s: int = 1, threads: int = 2,
          repeats: int = 20) -> list[str]:
    """Rows of one layer: kernel, ms, GFLOP/s."""
    rng = np.random.default_rng(0)
    pad = (k - 1) // 2
    g = gradc.Graph("layer")
    x = g.input("x", "float32", (n, c, hw, hw))
    w = g.input("w", "float32", (co, c, k, k))
    f = dict(strides=(s, s), start_padding=(pad, pad), end_padding=(pad, pad))
    y = ops.convolution(x, w, **f)
    oh = int(y.type.shape[2])
    dy = g.input("dy", "float32", (n, co, oh, oh))
    g.output(y, "y")
    extra = (hw + 2 * pad - k) % s
    g.output(ops.convolution(dy, w, direction="backward", output_padding=(extra, extra), **f),
             "dx")
    g.output(ops.convolution_filter_grad(x, dy, (co, c, k, k), **f), "dw")
    ex = gradc.compile(g, target="c", passes=None, threads=threads, profile=True)
    feeds = {"x": rng.standard_normal((n, c, hw, hw)).astype(np.float32),
             "w": rng.standard_normal((co, c, k, k)).astype(np.float32),
             "dy": rng.standard_normal((n, co, oh, oh)).astype(np.float32)}
    for _ in range(3):
        ex(**feeds)
    ex.profile(reset=True)
    for _ in range(repeats):
        ex(**feeds)
    flops = 2 * n * co * oh * oh * c * k * k
    rows = []
    for r in sorted(ex.profile(), key=lambda r: r["kernel"]):
        sec = r["seconds"] / repeats
        rows.append(f"| {n}x{c}x{hw}x{hw} -> {co}, {k}x{k} s{s} | "
                    f"{r['what'].split(' -> ')[0]} | {sec * 1e3:.3f} | {flops / sec / 1e9:.1f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--set", choices=(*SETS, "all"), default="all")
    args = ap.parse_args()
    print("| layer (N x Cin x H x W -> Cout) | kernel | ms | GFLOP/s |")
    print("|---|---|---:|---:|")
    for name, layers in SETS.items():
        if args.set in (name, "all"):
            for layer in layers:
                for row in bench(*layer, threads=args.threads, repeats=args.repeats):
                    print(row, flush=True)


if __name__ == "__main__":
    main()
