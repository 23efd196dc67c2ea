"""Every case of tests/cuda_cases.py and a small training step on the GPU, against the reference.

Run by ``benchmarks/gpu_smoke.sh`` (alone and under ``compute-sanitizer``): prints one row per
case -- compile time (generation, NVRTC on a cold cache, module load), first-call time (graph
capture and replay), the median call time, launches, and whether every output equals the
reference's bits (within 4 ulps for softmax, erf, sin and cos, whose libm is the GPU's, and
gelu within SPEC-transformers §25.4) -- then three steps of a Trainer on the GPU against the C
target's. Exits 1 on any mismatch. ``--cases NAME,NAME`` runs some cases only, ``--repeat N``
sets the timed calls (1 under a sanitizer), ``--runtime host`` runs the cases through the host
harness instead (no GPU; the trainer is skipped).

    python3 benchmarks/cuda_smoke.py [--cases pool2d_float32,...] [--repeat 20]
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
import tempfile
import time
from pathlib import Path
from typing import Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import gradc  # noqa: E402
from cuda_cases import (CASES, GELU, SUMMED, TRANSCENDENTAL, gelu_bound,  # noqa: E402
                        tiny_cnn)


def _same(got: np.ndarray, want: np.ndarray, name: str, feeds: dict[str, np.ndarray]) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if want.dtype.kind != "f":
        return bool(np.array_equal(got, want))
    nan = np.isnan(want)
    if not np.array_equal(np.isnan(got), nan):
        return False
    if name in GELU:  # SPEC-transformers §25.4: ulps plus an absolute term in x
        x, dy = (feeds[f] if f else None for f in GELU[name])
        fin = ~nan & ~np.isinf(want)
        err = np.abs(got[fin].astype(np.float64) - want[fin])
        return bool(np.array_equal(got[~fin & ~nan], want[~fin & ~nan])
                    and (err <= gelu_bound(want, x, dy)[fin]).all())
    if name in TRANSCENDENTAL:  # infinities exactly (log_softmax of -inf), the rest in ulps
        inf = np.isinf(want)
        fin = ~nan & ~inf
        if not np.array_equal(got[inf], want[inf]) or np.isinf(got[fin]).any():
            return False
        tol = (1 if want.dtype == np.float16 else 4) * np.spacing(np.abs(want[fin]))
        return bool((np.abs(got[fin].astype(np.float64) - want[fin]) <= tol).all())
    if name in SUMMED:
        got, want = got[~nan], want[~nan]
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
    return bool(np.array_equal(got.view(width), want.view(width)))


def run_case(name: str, cache: str, repeat: int, runtime: str = "device") -> bool:
    g, feeds = CASES[name]()
    want = gradc.compile(g, target="reference")(**feeds)
    t0 = time.perf_counter()
    ex = gradc.compile(g, target="cuda", cache_dir=cache, runtime=runtime)
    t1 = time.perf_counter()
    got = ex(**feeds)
    t2 = time.perf_counter()
    times = []
    for _ in range(repeat):
        s = time.perf_counter()
        ex(**feeds)
        times.append(time.perf_counter() - s)
    ok = all(_same(got[k], want[k], k, feeds) for k in want)
    launches = len(ex._runner.program.launches)
    print(f"{name:28} {1e3 * (t1 - t0):10.1f} {1e3 * (t2 - t1):9.1f} "
          f"{1e3 * float(np.median(times)):9.3f} {launches:8d}  "
          f"{'bit-exact' if ok else 'MISMATCH'}", flush=True)
    return ok


# Cases run once more with sums="split", thresholds lowered so that their small shapes split
# (several parts per group, one part, products in 3 parts along K): within the whole-graph
# tolerance of gradc check (tests/test_cuda_split.py holds them to SPEC-training §9.5's bound),
# and two calls give the same bits (no atomics, a fixed tree: reproducible on the GPU).
SPLIT_CASES = ("reductions_float32", "reductions_float16", "batch_norm_float32",
               "batch_norm_chunks_float32", "batch_norm_kept_axes_float32", "convolution_float32",
               "gemm_float64", "normalization_float32")


@contextmanager
def small_splits() -> Iterator[None]:
    """split.py's thresholds lowered and every product split in 3 parts along K (restored
    after)."""
    from gradc.backends.cuda import split, tiling  # lazy: only for the split cases

    saved = {k: getattr(split, k) for k in ("MIN_TERMS", "MIN_PART", "TARGET_BLOCKS",
                                             "ROW_MIN", "TARGET_THREADS")}
    choose_split = tiling.choose_split
    split.MIN_TERMS, split.MIN_PART, split.TARGET_BLOCKS = 8, 16, 8
    split.ROW_MIN, split.TARGET_THREADS = 4, 64
    tiling.choose_split = lambda p: (tiling.choose(p), min(3, tiling.cdiv(
        p.k, tiling.choose(p).bk)))
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(split, k, v)
        tiling.choose_split = choose_split


def run_split_case(name: str, cache: str, runtime: str = "device") -> bool:
    from gradc.check import max_error, output_scales  # lazy: the whole-graph tolerance

    g, feeds = CASES[name]()
    want = gradc.compile(g, target="reference")(**feeds)
    with small_splits():
        ex = gradc.compile(g, target="cuda", cache_dir=cache, runtime=runtime, sums="split")
    got, again = ex(**feeds), ex(**feeds)
    floors = output_scales(want)
    ok = True
    for k, w in want.items():
        a, b = np.asarray(got[k]), np.asarray(again[k])
        same = a.tobytes() == b.tobytes()
        close = max_error(a, w, floors.get(w.dtype.str, 0.0))[1] if k in SUMMED or \
            k in TRANSCENDENTAL else _same(a, w, k, feeds)
        ok &= same and close
    reordered = len(ex._runner.program.reordered)
    print(f"{name:28} {'split':>10} {reordered:>9} {'':9} {len(ex._runner.program.launches):8d}"
          f"  {'within tolerance, reproducible' if ok else 'MISMATCH'} ({reordered} reordered)",
          flush=True)
    return ok and reordered > 0


def run_trainer(cache: str) -> bool:
    opt = gradc.optim.Adam(0.05)
    tc = gradc.Trainer(tiny_cnn(), opt, loss="cross_entropy", target="c")
    tg = gradc.Trainer(tiny_cnn(), opt, loss="cross_entropy", target="cuda", cache_dir=cache)
    rng = np.random.default_rng(1)
    ok = True
    for step in range(3):
        batch = {"x": rng.standard_normal((4, 3, 6, 6), dtype=np.float32),
                 "labels": rng.integers(0, 5, 4)}
        lc, lg = tc.step(**batch), tg.step(**batch)
        ok &= abs(lc - lg) <= 1e-6 * abs(lc)
        print(f"trainer step {step + 1}: loss c {lc!r} cuda {lg!r} "
              f"state {tg.last_step_bytes}", flush=True)
    for k, want in tc.state_dict().items():
        ok &= bool(np.allclose(tg.state_dict()[k], want, rtol=1e-5, atol=1e-6))
    print(f"trainer: {'agrees with the C target' if ok else 'MISMATCH'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--repeat", type=int, default=20, help="timed replays per case")
    ap.add_argument("--cache", default="", help="cache directory (default: a fresh one)")
    ap.add_argument("--runtime", default="device", choices=("device", "host"),
                    help="the GPU, or the host harness (no GPU)")
    args = ap.parse_args()
    cache = args.cache or tempfile.mkdtemp(prefix="gradc-cuda-")
    names = [n for n in args.cases.split(",") if n] or sorted(CASES)
    if args.runtime == "device":
        from gradc.backends.cuda import rt  # lazy: reports the device before the table
        d = rt.DeviceDriver(lambda s, a: b"")
        print(f"device {d.arch}, NVRTC {rt.nvrtc_version()}, cache {cache}")
    print(f"{'case':28} {'compile ms':>10} {'first ms':>9} {'step ms':>9} {'launches':>8}  "
          "result")
    ok = all([run_case(n, cache, args.repeat, args.runtime) for n in names])
    ok &= all([run_split_case(n, cache, args.runtime) for n in SPLIT_CASES
               if n in names])
    if args.runtime == "device":
        ok &= run_trainer(cache)
    print("ALL OK" if ok else "FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
