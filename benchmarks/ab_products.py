"""An A/B of code-generation variants on a model's gemm/convolution kernels (run on the GPU).

    python3 benchmarks/ab_products.py "VARIANT;VARIANT;..." SET[,SET] [BATCH] [--cache DIR]

A variant is a comma-separated list of ``GRADC_TRIAL_<NAME>=<value>`` environment settings
(the empty variant: none), read by toggles that a trial adds to the code generator for the
measurement and removes afterwards (the generator reads them when it writes a kernel, so both
variants' kernels are cached side by side). For every layer of ``bench_gpu_gemm.py``'s SETs
(resnet18, unet, squeezenet) and each kind (fwd, dgrad, wgrad), each variant's kernel is
compiled (NVRTC in parallel, first), run once and compared with the first variant's result bit
for bit (a difference is printed), then timed (the faster of two CUDA graphs of 20 launches).
The table gives ms per kernel and the totals, under ``sums="split"``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gradc  # noqa: E402
from bench_gpu_gemm import (KINDS, SETS, conv_graph, feeds_for, precompile,  # noqa: E402
                            tile_of, time_gradc)
from gradc.backends.cuda.target import default_cache_dir  # noqa: E402

PREFIX = "GRADC_TRIAL_"


def settings(variant: str) -> list[tuple[str, str]]:
    """The variant's (key, value) settings; ValueError for one that is not GRADC_TRIAL_."""
    out = []
    for kv in filter(None, variant.split(",")):
        key, eq, value = kv.partition("=")
        if not key.startswith(PREFIX) or not eq:
            raise ValueError(f"{kv!r}: expected {PREFIX}<NAME>=<value>")
        out.append((key, value))
    return out


def setenv(variant: str) -> None:
    """Clear every GRADC_TRIAL_ setting, then apply the variant's."""
    for key in [k for k in os.environ if k.startswith(PREFIX)]:
        del os.environ[key]
    os.environ.update(dict(settings(variant)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variants", help='";"-separated variants, e.g. ";GRADC_TRIAL_X=1"')
    ap.add_argument("sets", help=f"comma-separated sets of layers: {', '.join(SETS)}")
    ap.add_argument("batch", nargs="?", type=int, default=64)
    ap.add_argument("--cache", default=default_cache_dir())
    args = ap.parse_args()
    variants = args.variants.split(";")
    try:
        for v in variants:
            settings(v)  # checked before anything is compiled
    except ValueError as e:
        ap.error(str(e))
    sets = args.sets.split(",")
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        ap.error(f"set {unknown[0]!r}: expected one of {', '.join(SETS)}")
    rng = np.random.default_rng(0)
    work = [(name, L, kind) for name in sets for L in SETS[name] for kind in KINDS
            if not (L.name in ("conv1", "enc1a") and kind == "dgrad")]
    graphs = [conv_graph(L, args.batch, kind)[0] for _, L, kind in work]
    t0 = time.time()
    for v in variants:
        setenv(v)
        precompile(graphs, "sm_90", args.cache, None, "split")
    print(f"precompiled in {time.time() - t0:.1f} s", flush=True)
    totals = [0.0] * len(variants)
    print("| kernel | tile | " + " | ".join(v or "(none)" for v in variants) + " |")
    print("|---|---|" + "---:|" * len(variants))
    for name, L, kind in work:
        g, shapes = conv_graph(L, args.batch, kind)
        feeds = feeds_for(shapes, rng)
        ts, ref, ex = [], None, None
        for vi, v in enumerate(variants):
            setenv(v)
            ex = gradc.compile(g, target="cuda", passes=None, cache_dir=args.cache,
                               sums="split")
            got = np.asarray(ex(**feeds)["y"])
            if ref is None:
                ref = got
            elif got.tobytes() != ref.tobytes():
                print(f"DIFFERENT RESULT: {name} {L.name} {kind} under {v!r}", flush=True)
            t = min(time_gradc(ex, 20) for _ in range(2))
            ts.append(t)
            totals[vi] += t
        print(f"| {name} {L.name} {kind} | {tile_of(ex)} | "
              + " | ".join(f"{t * 1e3:.4f}" for t in ts) + " |", flush=True)
    print("| total | | " + " | ".join(f"{t * 1e3:.3f}" for t in totals) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
