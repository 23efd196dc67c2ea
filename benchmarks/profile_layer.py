"""One layer's gemm/convolution kernels launched a few times, for a profiler (run on the GPU).

    ncu --set full -k regex:k0 python3 benchmarks/profile_layer.py resnet18/l2/wgrad [...]
        [--batch 64] [--sums split] [--reps 3] [--cubins DIR] [--cache DIR]

Each ``set/layer/kind`` (``bench_gpu_gemm.py``'s layers; kind ``fwd``, ``dgrad`` or ``wgrad``)
is compiled as ``bench_gpu_gemm.py`` compiles it and launched ``--reps`` times; ``--cubins``
also writes each program's source and CUBIN there (``cuobjdump -sass`` reads them), so a
profiler's report and the machine code can be read side by side.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gradc  # noqa: E402
from bench_gpu_gemm import SETS, conv_graph, feeds_for, source  # noqa: E402
from gradc.backends.cuda import build  # noqa: E402
from gradc.backends.cuda.target import default_cache_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("layers", nargs="+", help="set/layer/kind, e.g. resnet18/l2/wgrad")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sums", default="split", choices=("split", "canonical"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cubins", default="")
    ap.add_argument("--cache", default=default_cache_dir())
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for spec in args.layers:
        set_name, layer_name, kind = spec.split("/")
        L = next(x for x in SETS[set_name] if x.name == layer_name)
        g, shapes = conv_graph(L, args.batch, kind)
        ex = gradc.compile(g, target="cuda", passes=None, cache_dir=args.cache, sums=args.sums)
        feeds = feeds_for(shapes, rng)
        for _ in range(args.reps):
            ex(**feeds)
        if args.cubins:
            out = Path(args.cubins)
            out.mkdir(parents=True, exist_ok=True)
            src = source(g, args.sums)
            stem = spec.replace("/", "_")
            (out / f"{stem}.cu").write_text(src)
            (out / f"{stem}.cubin").write_bytes(build.compile_cubin(src, "sm_90", args.cache))
        print(f"{spec}: {args.reps} runs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
