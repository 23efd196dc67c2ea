"""The C target's transcendental element-wise ops: speed against PyTorch, exactness against the
reference.

    python benchmarks/bench_transcendental.py [--ops exp,gelu,...] [--samples 10000000]
        [--f64-samples 1000000] [--threads 2] [--repeat 15] [--quick] [--no-speed] [--no-exact]

Speed: one graph per op over 2^20 float32 elements (softmax: 8192 rows of 128), compiled by
gradc's C target with ``threads=T``, against PyTorch's CPU kernel with ``torch.set_num_threads(T)``;
the median of ``--repeat`` calls each, in ms per 2^20 elements (peers alternate call by call).

Exactness (SPEC-training §9.5, SPEC-transformers §25.4): the C target's result against the
reference target's (float64 evaluation rounded once) on every float16 value, ``--samples``
float32 values and ``--f64-samples`` float64 values (a third uniform over the op's working range,
a third normal, a third random finite bit patterns; the special values of ``SPECIALS`` always):
the elements whose bits differ (NaN against NaN counts as equal), the largest difference in ulps
of the reference's value, and the largest error over the op's tolerance (at most 1 passes;
softmax and log_softmax: §17.1's bound, whose terms are not ulps of the result).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import gradc
from gradc import ops

try:  # lazy-optional: the speed table needs PyTorch
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

N = 1 << 20
ROW = 128  # softmax row length (a GPT's attention over 128 positions)
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0, 1e-300, -1e-300, 5e-324,
            -5e-324, 2.2250738585072014e-308, 1e-45, 1.4e-45, 1e-38, 3.4e38, -3.4e38, 65504.0,
            6e-8, 709.78, 709.79, -708.4, -745.1, -745.2, 88.72, 88.73, -103.9, -104.0, 11.09,
            -17.3, 0.625, -0.625, 27.5, -27.5, 1e22, 1e300, -1e300, 1048576.0, 1048575.9,
            1.7976931348623157e308, math.pi, -math.pi / 2, 3 * math.pi / 4, 6.0, -6.0]


@dataclass
class Op:
    """A one-op graph builder, its PyTorch twin, the working range and the tolerance kind."""

    build: Callable[..., Any]            # (x[, dy]) -> Value
    torch_fn: Callable[..., Any] | None  # (x[, dy]) -> tensor
    lo: float
    hi: float
    gelu: bool = False                   # §25.4's absolute term
    grad: bool = False                   # takes dy
    rows: bool = False                   # softmax: (N / ROW, ROW) over the last axis


def _t(name: str, *a: Any) -> Callable[..., Any]:
    return lambda *x: getattr(torch, name)(*x, *a)


OPS: dict[str, Op] = {
    "exp": Op(ops.exp, _t("exp"), -110, 90),
    "log": Op(ops.log, _t("log"), 0, 100),
    "tanh": Op(ops.tanh, _t("tanh"), -12, 12),
    "sigmoid": Op(ops.sigmoid, _t("sigmoid"), -40, 40),
    "pow3": Op(lambda x: ops.pow(x, 3.0), _t("pow", 3), -50, 50),
    "pow-2.5": Op(lambda x: ops.pow(x, -2.5), _t("pow", -2.5), 0, 50),
    "erf": Op(ops.erf, _t("erf"), -6, 6),
    "sin": Op(ops.sin, _t("sin"), -100, 100),
    "cos": Op(ops.cos, _t("cos"), -100, 100),
    "gelu": Op(lambda x: ops.gelu(x, "none"), lambda x: F.gelu(x), -12, 12, gelu=True),
    "gelu_tanh": Op(lambda x: ops.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh"),
                    -12, 12, gelu=True),
    "gelu_grad": Op(lambda x, d: ops.gelu_grad(x, d, "none"),
                    lambda x, d: torch.ops.aten.gelu_backward(d, x), -12, 12, True, True),
    "gelu_grad_tanh": Op(lambda x, d: ops.gelu_grad(x, d, "tanh"),
                         lambda x, d: torch.ops.aten.gelu_backward(d, x, approximate="tanh"),
                         -12, 12, True, True),
    "softmax": Op(lambda x: ops.softmax(x, (1,)), lambda x: torch.softmax(x, -1), -20, 20,
                  rows=True),
    "log_softmax": Op(lambda x: ops.log_softmax(x, (1,)), lambda x: torch.log_softmax(x, -1),
                      -20, 20, rows=True),
}


def graph(op: Op, dtype: str, n: int) -> gradc.Graph:
    g = gradc.Graph("t")
    shape = (n // ROW, ROW) if op.rows else (n,)
    x = g.input("x", dtype, shape)
    y = op.build(x, g.input("d", dtype, shape)) if op.grad else op.build(x)
    g.output(y, "y")
    return g


def samples(op: Op, dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values of ``dtype`` (every value for float16), special values first."""
    dt = np.dtype(dtype)
    if dt == np.float16:
        return np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    k = n // 3
    uni = rng.uniform(op.lo, op.hi, k)
    nrm = rng.standard_normal(k) * (op.hi - op.lo) / 8
    ubits = np.dtype(f"u{dt.itemsize}")
    raw = rng.integers(0, np.iinfo(ubits).max, n - 2 * k, dtype=ubits, endpoint=True).view(dt)
    raw = raw[np.isfinite(raw)]
    with np.errstate(over="ignore"):
        x = np.concatenate([np.array(SPECIALS).astype(dt), uni.astype(dt), nrm.astype(dt), raw])
    if op.rows:  # whole rows
        x = x[: len(x) // ROW * ROW]
    return x


def softmax_tolerance(name: str, dtype: str, x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """§17.1's bound for rows of ROW: ε (2n + 12 + |x - max|) |y| for softmax,
    ε (2n + 12 + 2 |x - max| + 5 log T) for log_softmax, plus η (and 2⁻⁹|y| + 2⁻²⁴ for
    float16), ε and η of the accumulation type."""
    f64 = np.dtype(dtype) == np.float64
    eps, eta = (2.0 ** -52, 2.0 ** -1022) if f64 else (2.0 ** -23, 2.0 ** -126)
    rows = x.astype(np.float64).reshape(-1, ROW)
    y = np.abs(ref.astype(np.float64)).reshape(-1, ROW)
    with np.errstate(all="ignore"):
        mx = np.nanmax(np.where(np.isnan(rows), -np.inf, rows), axis=1, keepdims=True)
        sh = np.abs(rows - mx)
        if name == "softmax":
            tol = eps * (2 * ROW + 12 + sh) * y
        else:
            t = np.log(np.exp(rows - mx).sum(axis=1, keepdims=True))
            tol = eps * (2 * ROW + 12 + 2 * sh + 5 * t)
    tol = tol + eta + ((2.0 ** -9 * y + 2.0 ** -24) if np.dtype(dtype) == np.float16 else 0)
    return tol.reshape(-1)


def tolerance(name: str, op: Op, dtype: str, x: np.ndarray, d: np.ndarray | None,
              ref: np.ndarray) -> np.ndarray:
    """§9.5 / §25.4: u ulps of the reference, plus gelu's absolute term; §17.1's for softmax."""
    if op.rows:
        return softmax_tolerance(name, dtype, x, ref)
    dt = np.dtype(dtype)
    u = 1 if dt == np.float16 else 4
    tol = u * np.spacing(np.abs(ref).astype(dt)).astype(np.float64)
    if op.gelu:
        eps = 2.0 ** -52 if dt == np.float64 else 2.0 ** -23
        term = 4 * eps * (1 + np.abs(x.astype(np.float64)))
        tol = tol + (term * np.abs(d.astype(np.float64)) if d is not None else term)
    return tol


def exactness(name: str, op: Op, dtype: str, n: int, rng: np.random.Generator) -> list[str]:
    """One row: elements, differing, max ulps, worst error / tolerance."""
    x = samples(op, dtype, n, rng)
    shape = (len(x) // ROW, ROW) if op.rows else (len(x),)
    feeds = {"x": x.reshape(shape)}
    d = None
    if op.grad:
        d = rng.standard_normal(len(x)).astype(dtype)
        feeds["d"] = d.reshape(shape)
    g = graph(op, dtype, len(x))
    ref = gradc.compile(g, target="reference", passes=None)(**feeds)["y"].reshape(-1)
    got = gradc.compile(g, target="c")(**feeds)["y"].reshape(-1)
    bits = np.dtype(f"u{ref.dtype.itemsize}")
    nan = np.isnan(ref) & np.isnan(got)
    differ = ~((ref.view(bits) == got.view(bits)) | nan)
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    with np.errstate(all="ignore"):
        err = np.where(differ, np.abs(g64 - r64), 0.0)
        err[differ & ~(np.isfinite(r64) & np.isfinite(g64))] = np.inf  # NaN/inf mismatches
        ulps = np.where(differ, err / np.spacing(np.abs(ref)).astype(np.float64), 0.0)
        over = np.where(differ, err / tolerance(name, op, dtype, x, d, ref), 0.0)
    return [name, dtype, f"{len(x):,}", f"{int(differ.sum()):,}",
            f"{float(ulps.max(initial=0)):.3g}", f"{float(over.max(initial=0)):.3g}"]


def timed(fns: dict[str, Callable[[], Any]], repeat: int,
          rounds: int = 3) -> dict[str, tuple[float, float]]:
    """(median, best) seconds per call: ``rounds`` rounds in which each peer makes one untimed
    call and then ``repeat / rounds`` timed ones. Peers are timed in blocks, not call by call:
    the idle OpenMP threads of one runtime (gradc's libgomp, PyTorch's) spin for a while after
    each call, and would take the cores from the other's next call."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            f()
            for _ in range(-(-repeat // rounds)):
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def speed(name: str, op: Op, threads: int, repeat: int) -> list[str]:
    rng = np.random.default_rng(0)
    x = rng.uniform(op.lo, op.hi, N).astype(np.float32)
    if name == "pow-2.5" or name == "log":
        x = np.abs(x)
    shape = (N // ROW, ROW) if op.rows else (N,)
    feeds = {"x": x.reshape(shape)}
    if op.grad:
        feeds["d"] = rng.standard_normal(N).astype(np.float32).reshape(shape)
    ex = gradc.compile(graph(op, "float32", N), target="c", threads=threads)
    fns: dict[str, Callable[[], Any]] = {"c": lambda: ex(**feeds)}
    if torch is not None and op.torch_fn is not None:
        torch.set_num_threads(threads)
        tx = [torch.from_numpy(feeds[k]) for k in ("x", "d") if k in feeds]
        fns["torch"] = lambda: op.torch_fn(*tx)
    t = timed(fns, repeat)
    (c, cb), (p, pb) = t["c"], t.get("torch", (math.nan, math.nan))
    return [name, f"{c * 1e3:.3f}", f"{p * 1e3:.3f}", f"{c / p:.2f}", f"{cb * 1e3:.3f}",
            f"{pb * 1e3:.3f}"]


def table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--samples", type=int, default=10_000_000, help="float32 values per op")
    ap.add_argument("--f64-samples", type=int, default=1_000_000, help="float64 values per op")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="10^5 float32, 10^4 float64 samples")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--no-exact", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.samples, args.f64_samples, args.repeat = 100_000, 10_000, 5
    names = args.ops.split(",")
    unknown = [n for n in names if n not in OPS]
    if unknown:
        sys.exit(f"bench_transcendental: --ops: unknown {unknown}; expected some of {list(OPS)}")
    if not args.no_speed:
        rows = []
        for name in names:
            print(f"speed: {name}", file=sys.stderr)
            rows.append(speed(name, OPS[name], args.threads, args.repeat))
        print(f"\nms per 2^20 float32 elements, {args.threads} threads (median and best of "
              f"{args.repeat})\n")
        print(table(["op", "gradc C", "PyTorch", "C / PyTorch", "C best", "PyTorch best"],
                    rows))
    if not args.no_exact:
        rows = []
        rng = np.random.default_rng(1)
        for name in names:
            for dtype, n in (("float16", 0), ("float32", args.samples),
                             ("float64", args.f64_samples)):
                print(f"exactness: {name} {dtype}", file=sys.stderr)
                rows.append(exactness(name, OPS[name], dtype, n, rng))
        print("\nC target against the reference (bits differ; ulps of the reference; error / "
              "the tolerance: 4 ulps, 1 in float16, plus gelu's absolute term)\n")
        print(table(["op", "dtype", "elements", "differing", "max ulps", "max error / tol"],
                    rows))


if __name__ == "__main__":
    main()
