"""Times the cuda target's layer norm and embedding kernels on the GPU against PyTorch's.

    python benchmarks/bench_cuda_transformers.py [--shape 8,256,512] [--vocab 8192]
        [--rounds 20] [--cache DIR] [--host]

GPT-sized (batch x context x width, float32, normalized over the width, scale and bias of the
width): ``mean_variance_normalization`` forward and its gradient; ``gather`` (the token
embedding) and ``gather_grad`` (its gradient). Each gradc program is checked first against the
reference target (bit for bit), then timed as its captured CUDA graph replayed and synchronized
(no copies, no Executable checks: what a training step pays for these kernels, plus one graph
launch), and its number of launches is reported. PyTorch (CUDA tensors, same data) is timed
for ``layer_norm`` (forward; backward through ``torch.autograd.grad`` on a retained graph) and
``embedding`` (forward; backward), each synchronized. Medians and best of ``--rounds`` rounds
of 10 calls, in ms; markdown to stdout. Needs a GPU (and torch with CUDA for the peer column);
``--host`` runs the same programs through the host harness instead (a dry run of the script).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import gradc
from gradc import ops

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _rounds(fn: Callable[[], Any], sync: Callable[[], Any], rounds: int) -> tuple[float, float]:
    """Median and best ms per call over ``rounds`` rounds of 10 calls."""
    fn()
    sync()
    per = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(10):
            fn()
        sync()
        per.append((time.perf_counter() - t) / 10 * 1e3)
    return float(np.median(per)), float(np.min(per))


def _program(g: gradc.Graph, feeds: dict[str, np.ndarray], cache: str, host: bool) -> Any:
    """The compiled cuda program, checked bit for bit against the reference."""
    want = gradc.compile(g, target="reference")(**feeds)
    ex = gradc.compile(g, target="cuda", cache_dir=cache, runtime="host" if host else "device")
    got = ex(**feeds)
    for k, w in want.items():
        if np.asarray(got[k]).tobytes() != w.tobytes():
            raise SystemExit(f"{g.name}: output {k} differs from the reference")
    return ex._runner


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="8,256,512")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--cache", default="")
    ap.add_argument("--host", action="store_true", help="the host harness (no GPU)")
    args = ap.parse_args()
    b, t, w = (int(v) for v in args.shape.split(","))
    cache = args.cache or tempfile.mkdtemp(prefix="gradc-cuda-")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((b, t, w)) * 2 + 1).astype(np.float32)
    dy = rng.standard_normal((b, t, w)).astype(np.float32)
    s, bias = rng.standard_normal(w).astype(np.float32), rng.standard_normal(w).astype(np.float32)
    table = rng.standard_normal((args.vocab, w)).astype(np.float32)
    tok = rng.integers(0, args.vocab, (b, t))

    def graph(name: str, inputs: dict[str, tuple[str, tuple]], fn: Callable[..., Any]
              ) -> gradc.Graph:
        g = gradc.Graph(name)
        vals = {k: g.input(k, d, sh) for k, (d, sh) in inputs.items()}
        outs = fn(*vals.values())
        for i, v in enumerate(outs if isinstance(outs, tuple) else (outs,)):
            g.output(v, f"y{i}")
        return g

    f32 = "float32"
    cases = {
        "layer norm forward": (graph("lnf", {"x": (f32, x.shape), "s": (f32, (w,)),
                                             "b": (f32, (w,))},
                                     ops.mean_variance_normalization),
                               {"x": x, "s": s, "b": bias}),
        "layer norm gradient": (graph("lnb", {"x": (f32, x.shape), "dy": (f32, x.shape),
                                              "s": (f32, (w,))},
                                      ops.mean_variance_normalization_grad),
                                {"x": x, "dy": dy, "s": s}),
        "embedding (gather)": (graph("emb", {"t": (f32, table.shape), "i": ("int64", tok.shape)},
                                     ops.gather), {"t": table, "i": tok}),
        "embedding gradient (gather_grad)": (
            graph("embg", {"d": (f32, x.shape), "i": ("int64", tok.shape)},
                  lambda d, i: ops.gather_grad(d, i, table.shape)), {"d": dy, "i": tok}),
    }
    rows = []
    for name, (g, feeds) in cases.items():
        r = _program(g, feeds, cache, args.host)
        med, best = _rounds(lambda: r.driver.replay(r.graph), r.driver.synchronize, args.rounds)
        rows.append([name, len(r.program.launches), med, best])
    try:
        import torch  # lazy: the optional peer
        if args.host or not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        torch = None
    if torch is not None:
        F = torch.nn.functional
        dev = "cuda"
        X = torch.tensor(x, device=dev, requires_grad=True)
        S = torch.tensor(s, device=dev, requires_grad=True)
        B = torch.tensor(bias, device=dev, requires_grad=True)
        DY = torch.tensor(dy, device=dev)
        T = torch.tensor(table, device=dev, requires_grad=True)
        I = torch.tensor(tok, device=dev)
        with torch.no_grad():
            peers = [lambda: F.layer_norm(X, (w,), S, B)]
        Y = F.layer_norm(X, (w,), S, B)
        peers.append(lambda: torch.autograd.grad(Y, (X, S, B), DY, retain_graph=True))
        with torch.no_grad():
            peers.append(lambda: F.embedding(I, T))
        E = F.embedding(I, T)
        peers.append(lambda: torch.autograd.grad(E, (T,), DY, retain_graph=True))
        for row, fn in zip(rows, peers):
            row += list(_rounds(fn, torch.cuda.synchronize, args.rounds))
    print(f"shape {b}x{t}x{w}, vocabulary {args.vocab}, float32; ms per call (median, best)\n")
    print("| kernel | launches | gradc cuda | best | PyTorch | best | PyTorch / gradc |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        peer = (f"{row[4]:.4f} | {row[5]:.4f} | {row[4] / row[2]:.2f}" if len(row) > 4
                else "- | - | -")
        print(f"| {row[0]} | {row[1]} | {row[2]:.4f} | {row[3]:.4f} | {peer} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
