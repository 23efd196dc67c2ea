"""Times the C target's gemm kernel (old: HEAD's, new: the working tree's) against NumPy/PyTorch.

    python benchmarks/bench_gemm.py [--threads 2] [--repeats 7] [--shapes all|quick]

Shapes (float32): 1024^3, and the gemms of one training step of tests/real_models.py's MLP
(batch 8, Linear 3072->128 as PyTorch stores it: W is 128 x 3072, so the forward is
``x @ W^T`` with ``trans_b``; backward ``dx = dy @ W`` and ``dW = dy^T @ x`` with ``trans_a``)
and of resnet18's fc (512 -> 1000, batch 8, same three forms). Each gradc peer is a one-gemm
graph compiled for the "c" target with ``threads``; the "old" peer is the same graph with
``backends/c/gemm.py`` of git HEAD loaded as a module and swapped into the emitter table
(skipped when HEAD's file equals the working tree's). Every gradc result is checked bit for
bit against the reference target before timing (the status column), NumPy (``a @ b``,
OpenBLAS with FMA, OPENBLAS_NUM_THREADS=threads) and PyTorch (if installed,
``torch.set_num_threads``) are checked to 1e-3 relative only for information.

Peaks: a register-only C loop of independent vector multiplies and adds (no FMA, as gradc's
``-ffp-contract=off`` code must do) and one of FMAs, on ``threads`` OpenMP threads, compiled
with ``-O3 -march=native``; GFLOP/s counts a multiply-add as 2 flops, so the columns
"%mul+add" and "%fma" show the fraction of each peak. Times are the medians of ``--repeats``
measurements, each of enough calls to last about 50 ms. Progress to stderr, a Markdown table
to stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent


def _threads_from_argv() -> str:
    """``--threads`` read before NumPy is imported (OpenBLAS fixes its pool on import)."""
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "2"


os.environ["OPENBLAS_NUM_THREADS"] = _threads_from_argv()
os.environ["OMP_NUM_THREADS"] = _threads_from_argv()

import numpy as np  # noqa: E402

import gradc  # noqa: E402
from gradc import ops  # noqa: E402
from gradc.backends.c import emit as c_emit  # noqa: E402

# name, (M, N, K), trans_a, trans_b: a is (K, M) if trans_a else (M, K); b likewise.
SHAPES: list[tuple[str, tuple[int, int, int], bool, bool]] = [
    ("square 1024", (1024, 1024, 1024), False, False),
    ("mlp fwd x@W^T", (8, 128, 3072), False, True),
    ("mlp dx dy@W", (8, 3072, 128), False, False),
    ("mlp dW dy^T@x", (128, 3072, 8), True, False),
    ("fc fwd x@W^T", (8, 1000, 512), False, True),
    ("fc dx dy@W", (8, 512, 1000), False, False),
    ("fc dW dy^T@x", (1000, 512, 8), True, False),
]

PEAK_SOURCE = r"""
#include <omp.h>
#include <stdio.h>
typedef float v __attribute__((vector_size(%(vb)d)));
volatile float one = 1.0f, zero = 0.0f;
int main(void) {
    const long iters = 20000000L;
    double t0 = omp_get_wtime();
    float sink = 0;
    #pragma omp parallel num_threads(%(nt)d) reduction(+:sink)
    {
        v m = (v){0} + one, z = (v){0} + zero;
        v a0 = m, a1 = m, a2 = m, a3 = m, a4 = m, a5 = m, a6 = m, a7 = m;
        v b0 = m, b1 = m, b2 = m, b3 = m, b4 = m, b5 = m, b6 = m, b7 = m;
        for (long i = 0; i < iters; i++) {
            %(body)s
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3),
                                  "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7));
            __asm__ volatile("" : "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3),
                                  "+v"(b4), "+v"(b5), "+v"(b6), "+v"(b7));
        }
        v s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7;
        sink += s[0];
    }
    double dt = omp_get_wtime() - t0;
    /* flops: 16 vector ops per iteration per thread, %(fl)d flops per lane each */
    printf("%%.3f %%f\n", (double)iters * 16 * %(lanes)d * %(fl)d * %(nt)d / dt / 1e9, sink);
    return 0;
}
"""
MULADD = ("a0 = a0 * m; a1 = a1 * m; a2 = a2 * m; a3 = a3 * m; a4 = a4 * m; a5 = a5 * m; "
          "a6 = a6 * m; a7 = a7 * m; b0 = b0 + z; b1 = b1 + z; b2 = b2 + z; b3 = b3 + z; "
          "b4 = b4 + z; b5 = b5 + z; b6 = b6 + z; b7 = b7 + z;")
FMA = " ".join(f"{r}{i} = {r}{i} * m + z;" for r in "ab" for i in range(8))


def peak(kind: str, threads: int) -> float:
    """GFLOP/s of a register-only loop: 'muladd' (separate mul and add) or 'fma'."""
    vb = 64 if "avx512f" in Path("/proc/cpuinfo").read_text() else 32
    src = PEAK_SOURCE % {"vb": vb, "nt": threads, "lanes": vb // 4,
                         "body": MULADD if kind == "muladd" else FMA,
                         "fl": 1 if kind == "muladd" else 2}
    contract = "-ffp-contract=off" if kind == "muladd" else "-ffp-contract=fast"
    with tempfile.TemporaryDirectory() as tmp:
        c, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        c.write_text(src)
        subprocess.run(["gcc", "-O3", "-march=native", contract, "-fopenmp", str(c), "-o",
                        str(exe)], check=True)
        runs = [float(subprocess.run([str(exe)], check=True, capture_output=True,
                                     text=True).stdout.split()[0]) for _ in range(5)]
    return max(runs)


def old_emitter() -> Callable[..., Any] | None:
    """HEAD's ``emit_gemm`` (None when HEAD's gemm.py equals the working tree's)."""
    text = subprocess.run(["git", "show", "HEAD:backends/c/gemm.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    if text == (ROOT / "backends" / "c" / "gemm.py").read_text():
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("gradc_gemm_head", f.name)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    os.unlink(f.name)
    return mod.emit_gemm


def graph(mnk: tuple[int, int, int], ta: bool, tb: bool) -> gradc.Graph:
    """One float32 gemm ``y = op(a) @ op(b)``."""
    m, n, k = mnk
    g = gradc.Graph("gemm")
    a = g.input("a", "float32", (k, m) if ta else (m, k))
    b = g.input("b", "float32", (n, k) if tb else (k, n))
    g.output(ops.gemm(a, b, trans_a=ta, trans_b=tb), "y")
    return g


def compile_c(g: gradc.Graph, emitter: Callable[..., Any] | None, threads: int) -> Any:
    """The graph compiled for "c", with ``emitter`` as the gemm kernel if given."""
    saved = c_emit.EMITTERS["gemm"]
    if emitter is not None:
        c_emit.EMITTERS["gemm"] = emitter
    try:
        return gradc.compile(g, target="c", passes=None, threads=threads)
    finally:
        c_emit.EMITTERS["gemm"] = saved


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds per call over ``repeats`` measurements of ~50 ms each."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, int(0.05 / one))
    meds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        meds.append((time.perf_counter() - t0) / calls)
    return statistics.median(meds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--shapes", choices=("all", "quick"), default="all")
    args = p.parse_args()
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    old = old_emitter()
    pk_ma, pk_fma = peak("muladd", args.threads), peak("fma", args.threads)
    print(f"peak, {args.threads} threads: mul+add {pk_ma:.1f} GFLOP/s, fma {pk_fma:.1f} GFLOP/s"
          f" (flops: 2 per multiply-add)")
    print()
    print("| gemm | M x N x K | peer | ms | GFLOP/s | %mul+add | %fma | check |")
    print("|---|---|---|---|---|---|---|---|")
    shapes = SHAPES if args.shapes == "all" else SHAPES[1:]
    rng = np.random.default_rng(0)
    for name, (m, n, k), ta, tb in shapes:
        print(f"{name} ...", file=sys.stderr)
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        g = graph((m, n, k), ta, tb)
        want = gradc.compile(g, target="reference", passes=None)(a=a, b=b)["y"]
        peers: list[tuple[str, Callable[[], Any], str]] = []
        for label, em in (("gradc c old", old), ("gradc c new", None)):
            if label.endswith("old") and old is None:
                continue
            exe = compile_c(g, em, args.threads)
            ok = np.array_equal(exe(a=a, b=b)["y"].view(np.uint32), want.view(np.uint32))
            peers.append((label, lambda exe=exe: exe(a=a, b=b), "bits ok" if ok else "WRONG"))
        opa, opb = (a.T if ta else a), (b.T if tb else b)
        close = np.allclose(opa @ opb, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
        peers.append(("numpy", lambda: opa @ opb, "~1e-3" if close else "differs"))
        if torch is not None:
            ta_, tb_ = torch.from_numpy(opa), torch.from_numpy(opb)
            peers.append(("torch", lambda: ta_ @ tb_, "~1e-3"))
        flops = 2.0 * m * n * k
        for label, fn, status in peers:
            s = timed(fn, args.repeats)
            gf = flops / s / 1e9
            print(f"| {name} | {m}x{n}x{k} | {label} | {s * 1e3:.3f} | {gf:.1f} | "
                  f"{100 * gf / pk_ma:.0f}% | {100 * gf / pk_fma:.0f}% | {status} |", flush=True)


if __name__ == "__main__":
    main()
