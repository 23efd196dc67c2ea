"""Registers, spills and shared memory of every tile shape of the cuda target's products.

    python benchmarks/cuda_tile_resources.py [--dtypes float32,float64] [--arch sm_90]

For each tile of ``tiling.tiles`` (and the direct kernel) the kernels of a gemm (plain: no
skipped terms) and of a padded 3x3 convolution's three products (forward, input gradient,
filter gradient: skipped terms, so the masked path is there too) are compiled by NVRTC with the
target's options plus ``--ptxas-options=-v``; the table lists ptxas's report: registers per
thread, bytes spilled (stores), static shared memory per block, and the blocks of 256 threads an
SM can hold by registers (65536 of them) and by shared memory (227 KB). Needs NVRTC only (no
GPU): ``pip install 'gradc[cuda]'``.
"""

from __future__ import annotations

import argparse
import re

import gradc
from gradc import ops
from gradc.backends.cuda import build, rt, tiling
from gradc.backends.cuda.emit import generate


def ptxas_report(source: str, arch: str) -> dict[str, tuple[int, int, int]]:
    """Kernel name -> (registers, spill store bytes, shared bytes), from ptxas's log."""
    m = rt.nvrtc()
    err, prog = m.nvrtcCreateProgram(source.encode(), b"tiles.cu", 0, [], [])
    opts = [o.encode() for o in build.options(arch)] + [b"--ptxas-options=-v"]
    try:
        (result,) = m.nvrtcCompileProgram(prog, len(opts), opts)
        _, size = m.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        m.nvrtcGetProgramLog(prog, log)
    finally:
        m.nvrtcDestroyProgram(prog)
    text = log.decode(errors="replace")
    if result != m.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC failed:\n{text[-2000:]}")
    out = {}
    for name, body in re.findall(r"Function properties for (\w+)\n(.*?)(?=Function properties|\Z)",
                                 text, re.S):
        regs = re.search(r"Used (\d+) registers", body)
        smem = re.search(r"(\d+) bytes smem", body)
        spill = re.search(r"(\d+) bytes spill stores", body)
        out[name] = (int(regs.group(1)) if regs else -1, int(spill.group(1)) if spill else 0,
                     int(smem.group(1)) if smem else 0)
    return out


def program(dtype: str, tile: tiling.Tile) -> str:
    """A gemm and a padded convolution with its two gradients, every product on ``tile``."""
    g = gradc.Graph("tiles")
    a, b = g.input("a", dtype, (256, 256)), g.input("b", dtype, (256, 256))
    x, w = g.input("x", dtype, (8, 64, 16, 16)), g.input("w", dtype, (64, 64, 3, 3))
    dy = g.input("dy", dtype, (8, 64, 16, 16))
    f = dict(start_padding=(1, 1), end_padding=(1, 1))
    g.output(ops.gemm(a, b), "mm")
    g.output(ops.convolution(x, w, **f), "fwd")
    g.output(ops.convolution(dy, w, direction="backward", **f), "dgrad")
    g.output(ops.convolution_filter_grad(x, dy, (64, 64, 3, 3), **f), "wgrad")
    orig = tiling.choose
    tiling.choose = lambda p: tile
    try:
        return generate(g, {}).source
    finally:
        tiling.choose = orig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--arch", default=build.DEFAULT_ARCH)
    args = ap.parse_args()
    print(f"NVRTC {rt.nvrtc_version()}, {args.arch}; registers / spilled bytes / shared bytes "
          "per kernel; blocks per SM by registers and by shared memory\n")
    print("| dtype | tile | threads computing | gemm | convolution | input gradient | "
          "filter gradient | blocks/SM |")
    print("|---|---|---:|---|---|---|---|---|")
    kernels = ("k0", "k1", "k2", "k3")
    for dtype in args.dtypes.split(","):
        acc = "double" if dtype == "float64" else "float"
        for t in [tiling.DIRECT, *tiling.tiles(acc)]:
            rep = ptxas_report(program(dtype, t), args.arch)
            cells = [f"{r} / {s} / {m}" for r, s, m in (rep.get(k, (-1, 0, 0)) for k in kernels)]
            regs = max(rep[k][0] for k in kernels if k in rep)
            smem = max(rep[k][2] for k in kernels if k in rep)
            by_regs = 65536 // (256 * (-(-regs // 8) * 8)) if regs > 0 else 0
            by_smem = (227 * 1024) // smem if smem else 32
            threads = 256 if t == tiling.DIRECT else t.threads
            print(f"| {dtype} | {t} | {threads} | {' | '.join(cells)} | {by_regs} / "
                  f"{min(by_smem, 32)} |", flush=True)


if __name__ == "__main__":
    main()
