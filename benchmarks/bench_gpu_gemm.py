"""gemm and convolution kernels of the cuda target on the GPU, against PyTorch (TF32 off).

    python3 benchmarks/bench_gpu_gemm.py [--batches 8,64] [--sets resnet18,unet,gemm]
        [--reps 20] [--sweep resnet18/l4,unet/dec1b/wgrad] [--cache DIR]

For every convolution layer of resnet18 and the UNet at 3x64x64 (tests/real_models.py) and
batch 8 and 64, three kernels -- the forward convolution (``fwd``), the input gradient
(``dgrad``: the backward direction, as the VJP makes it) and the filter gradient (``wgrad``) --
and a few gemms (square, resnet18's classifier, the MLP's first layer forward and backward):
gradc's time per kernel (a CUDA graph of ``--reps`` launches back to back, median of 5 replays;
the tile the cost model chose) and PyTorch's (``F.conv2d``, ``F.conv_transpose2d``,
``torch.nn.grad.conv2d_weight``, ``torch.matmul``, also captured as a CUDA graph of ``--reps``
calls; cuDNN and cuBLAS with TF32 off, ``cudnn.benchmark`` on), with GFLOP/s (2 x products) and
the ratio. Checks printed beside them:

- ``exact``: the layer's three kernels, and gemms with every transpose, at small shapes (batch 2,
  channels and sizes cut) equal the reference target's bits;
- ``bound``: at full size every result is within SPEC-training.md §9.5's bound of PyTorch's
  float64 result (``|got - ref| <= (K + 1) * 2**-23 * S``, ``S`` the same op on absolute values).

``--sweep`` times every tile shape (``tiling.tiles``) of the named layers (``set/layer``, or
``set/layer/kind`` for one of its kernels) at the
first batch size and prints the 12 fastest and the cost model's choice, to tune
``tiling.choose``. Kernels are compiled by NVRTC in
parallel threads first (the CUBIN cache, ``--cache``, makes a second run start at once). Needs
a GPU, torch, cuda-bindings and nvidia-cuda-nvrtc; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

import gradc
from gradc import ops
from gradc.api import _prepare
from gradc.backends.cuda import build, tiling
from gradc.backends.cuda.emit import generate
from gradc.backends.cuda.target import default_cache_dir
from gradc.ir.core import parameters_as_inputs


@dataclass(frozen=True)
class Layer:
    """A 2-d convolution layer: channels in and out, input size, kernel, stride, padding."""

    name: str
    ci: int
    co: int
    hw: int
    k: int = 3
    s: int = 1
    p: int = -1  # padding (-1: half the filter, as resnet18's and the UNet's layers)

    @property
    def pad(self) -> int:
        return (self.k - 1) // 2 if self.p < 0 else self.p

    @property
    def out(self) -> int:
        return (self.hw + 2 * self.pad - self.k) // self.s + 1


SETS: dict[str, list[Layer]] = {
    "resnet18": [Layer("conv1", 3, 64, 64, 7, 2), Layer("l1", 64, 64, 16),
                 Layer("l2.0", 64, 128, 16, 3, 2), Layer("l2", 128, 128, 8),
                 Layer("l2.ds", 64, 128, 16, 1, 2), Layer("l3.0", 128, 256, 8, 3, 2),
                 Layer("l3", 256, 256, 4), Layer("l3.ds", 128, 256, 8, 1, 2),
                 Layer("l4.0", 256, 512, 4, 3, 2), Layer("l4", 512, 512, 2),
                 Layer("l4.ds", 256, 512, 4, 1, 2)],
    "unet": [Layer("enc1a", 3, 16, 64), Layer("enc1b", 16, 16, 64), Layer("enc2a", 16, 32, 32),
             Layer("enc2b", 32, 32, 32), Layer("mid", 32, 32, 16), Layer("dec2a", 64, 16, 32),
             Layer("dec2b", 16, 16, 32), Layer("dec1a", 32, 16, 64), Layer("dec1b", 16, 16, 64),
             Layer("head", 16, 4, 64, 1)],
    # squeezenet1_0 at 3x64x64: its first layer (no padding), a fire module's squeeze and
    # 3x3 expand at each of its three sizes, and the classifier
    "squeezenet": [Layer("conv1", 3, 96, 64, 7, 2, 0), Layer("fire2.s", 96, 16, 14, 1),
                   Layer("fire2.e3", 16, 64, 14), Layer("fire5.s", 256, 32, 7, 1),
                   Layer("fire5.e3", 32, 128, 7), Layer("fire9.s", 512, 64, 3, 1),
                   Layer("fire9.e3", 64, 256, 3), Layer("head", 512, 10, 3, 1)],
}
# (name, a shape, b shape, trans_a, trans_b); the batch size B is filled in
GEMMS = [("square1024", (1024, 1024), (1024, 1024), False, False),
         ("square4096", (4096, 4096), (4096, 4096), False, False),
         ("resnet18.fc", ("B", 512), (10, 512), False, True),
         ("mlp.fc1", ("B", 3072), (128, 3072), False, True),
         ("mlp.fc1.dw", ("B", 128), ("B", 3072), True, False)]
KINDS = ("fwd", "dgrad", "wgrad")


def conv_graph(L: Layer, n: int, kind: str) -> tuple[gradc.Graph, dict[str, tuple]]:
    """One kernel's graph: fwd (x, w -> y), dgrad (dy, w -> dx), wgrad (x, dy -> dw)."""
    f = dict(strides=(L.s, L.s), start_padding=(L.pad,) * 2, end_padding=(L.pad,) * 2)
    xs, ws, ys = (n, L.ci, L.hw, L.hw), (L.co, L.ci, L.k, L.k), (n, L.co, L.out, L.out)
    g = gradc.Graph(f"{L.name}_{kind}")
    if kind == "fwd":
        y = ops.convolution(g.input("x", "float32", xs), g.input("w", "float32", ws), **f)
        shapes = {"x": xs, "w": ws}
    elif kind == "dgrad":
        extra = L.hw - ((L.out - 1) * L.s + L.k - 2 * L.pad)
        y = ops.convolution(g.input("dy", "float32", ys), g.input("w", "float32", ws),
                            direction="backward", output_padding=(extra, extra), **f)
        shapes = {"dy": ys, "w": ws}
    else:
        y = ops.convolution_filter_grad(g.input("x", "float32", xs),
                                        g.input("dy", "float32", ys), ws, **f)
        shapes = {"x": xs, "dy": ys}
    g.output(y, "y")
    return g, shapes


def torch_conv(L: Layer, kind: str, t: dict[str, torch.Tensor]) -> Callable[[], Any]:
    """PyTorch's kernel of the same computation."""
    p, s = L.pad, L.s
    if kind == "fwd":
        return lambda: F.conv2d(t["x"], t["w"], stride=s, padding=p)
    if kind == "dgrad":
        extra = L.hw - ((L.out - 1) * s + L.k - 2 * p)
        return lambda: F.conv_transpose2d(t["dy"], t["w"], stride=s, padding=p,
                                          output_padding=extra)
    shape = (L.co, L.ci, L.k, L.k)
    # PyTorch's input layout for conv2d_weight is (x, weight_size, grad_output)
    return lambda: torch.nn.grad.conv2d_weight(t["x"], shape, t["dy"], stride=s, padding=p)


def gemm_graph(name: str, a: tuple, b: tuple, ta: bool, tb: bool, n: int
               ) -> tuple[gradc.Graph, dict[str, tuple]]:
    a = tuple(n if d == "B" else d for d in a)
    b = tuple(n if d == "B" else d for d in b)
    g = gradc.Graph(name)
    g.output(ops.gemm(g.input("a", "float32", a), g.input("b", "float32", b), None,
                      trans_a=ta, trans_b=tb), "y")
    return g, {"a": a, "b": b}


def flops(g: gradc.Graph) -> float:
    """2 x the products of the graph's one gemm or convolution."""
    node = g.nodes[-1]
    y = node.outputs[0].type.shape
    if node.op == "gemm":
        a = node.inputs[0].type.shape
        k = a[-2] if node.attrs["trans_a"] else a[-1]
        return 2.0 * float(np.prod(y)) * k
    if node.op == "convolution_filter_grad":
        dy = node.inputs[1].type.shape
        return 2.0 * float(np.prod(y)) * dy[0] * float(np.prod(dy[2:]))
    w = node.inputs[1].type.shape
    per = w[1] * float(np.prod(w[2:]))
    if node.attrs["direction"] == "backward":  # every input element meets every filter tap
        x = node.inputs[0].type.shape
        return 2.0 * float(np.prod(x)) * w[1] * float(np.prod(w[2:]))
    return 2.0 * float(np.prod(y)) * per


def _cubin(job: tuple[str, str, str]) -> int:
    return len(build.compile_cubin(*job))


def source(g: gradc.Graph, sums: str) -> str:
    """The cuda source of a one-kernel graph, as ``gradc.compile(..., sums=sums)`` makes it."""
    opt, bound = _prepare(g, "cuda", None, None, (), True)
    return generate(parameters_as_inputs(opt.graph), bound, None, sums).source


def precompile(graphs: list[gradc.Graph], arch: str, cache: str,
               tiles: list[tiling.Tile | None] | None = None, sums: str = "canonical"
               ) -> float:
    """NVRTC for every graph (each on its tile of ``tiles``, where given) in parallel
    processes; the CUBIN cache keeps them for ``gradc.compile``. Returns seconds."""
    t0 = time.perf_counter()
    jobs = []
    for i, g in enumerate(graphs):
        with forced_tile(tiles[i] if tiles else None):
            jobs.append((source(g, sums), arch, cache))
    spawn = multiprocessing.get_context("spawn")  # no CUDA state is forked
    with ProcessPoolExecutor(min(16, os.cpu_count() or 1), mp_context=spawn) as pool:
        list(pool.map(_cubin, jobs, chunksize=4))
    return time.perf_counter() - t0


@contextmanager
def forced_tile(tile: tiling.Tile | None) -> Iterator[None]:
    """Every product generated inside takes ``tile`` (None: the cost model's choice)."""
    orig = tiling.choose
    if tile is not None:
        tiling.choose = lambda p, *rest: tile
    try:
        yield
    finally:
        tiling.choose = orig


def time_gradc(ex: gradc.Executable, reps: int) -> float:
    """Seconds per launch of the executable's one kernel: a CUDA graph of ``reps`` launches."""
    runner = ex._runner  # the CudaRunner: its driver, functions and arena
    drv = runner.driver
    graph = drv.capture(runner.functions * reps, runner.arena)
    drv.replay(graph)
    drv.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        drv.replay(graph)
        drv.synchronize()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / reps


def time_torch(fn: Callable[[], Any], reps: int) -> float:
    """Seconds per call of a PyTorch function, captured as a CUDA graph of ``reps`` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / reps


def within_bound(got: np.ndarray, fn64: Callable[[bool], torch.Tensor], terms: int) -> bool:
    """§9.5's bound against PyTorch in float64 (``fn64(absolute)``)."""
    ref, s = fn64(False).cpu().numpy(), fn64(True).cpu().numpy()
    tol = (terms + 1) * 2.0 ** -23 * s + 2.0 ** -126
    return bool((np.abs(got.astype(np.float64) - ref) <= tol).all())


def tile_of(ex: gradc.Executable) -> str:
    m = re.search(r"tile (\S+) \*/", ex.source or "")
    parts = re.search(r"in (\d+) parts of", ex.source or "")
    return (m.group(1) if m else "?") + (f" x{parts.group(1)} parts" if parts else "")


def feeds_for(shapes: dict[str, tuple], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def run_one(g: gradc.Graph, shapes: dict[str, tuple], torch_fn: Any, terms: int,
            args: argparse.Namespace, rng: np.random.Generator) -> tuple[str, bool]:
    """One row: gradc and PyTorch times, GFLOP/s, ratio, the bound check."""
    feeds = feeds_for(shapes, rng)
    ex = gradc.compile(g, target="cuda", passes=None, cache_dir=args.cache, sums=args.sums)
    got = ex(**feeds)["y"]
    tg = time_gradc(ex, args.reps)
    tens = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    tt = time_torch(torch_fn(tens), args.reps)

    def fn64(absolute: bool) -> torch.Tensor:
        t64 = {k: (v.abs() if absolute else v).double() for k, v in tens.items()}
        torch.backends.cudnn.benchmark = False  # no autotuning for the float64 checks
        try:
            return torch_fn(t64)()
        finally:
            torch.backends.cudnn.benchmark = True
    ok = within_bound(got, fn64, terms)
    fl = flops(g)
    row = (f"| {tile_of(ex)} | {tg * 1e3:.4f} | {fl / tg / 1e9:.0f} | {tt * 1e3:.4f} | "
           f"{fl / tt / 1e9:.0f} | {tt / tg:.2f} | {'ok' if ok else 'FAILED'} |")
    return row, ok


def small_graphs() -> list[tuple[gradc.Graph, dict[str, tuple]]]:
    """Every layer kind at a small shape, and gemm with every transpose."""
    graphs = []
    for name, layers in SETS.items():
        for L in layers:
            small = Layer(f"{name}.{L.name}", max(1, L.ci // 16), max(2, L.co // 16),
                          max(L.k, min(L.hw, 11)), L.k, L.s, L.p)
            graphs += [conv_graph(small, 2, kind) for kind in KINDS]
    for ta in (False, True):
        for tb in (False, True):
            a = (21, 37) if ta else (37, 21)
            b = (45, 21) if tb else (21, 45)
            graphs.append(gemm_graph(f"gemm{int(ta)}{int(tb)}", a, b, ta, tb, 1))
    return graphs


def exact_checks(graphs: list[tuple[gradc.Graph, dict[str, tuple]]], cache: str,
                 rng: np.random.Generator) -> bool:
    """The small graphs on the GPU equal the reference target's bits."""
    ok = True
    for g, shapes in graphs:
        feeds = feeds_for(shapes, rng)
        want = gradc.compile(g, target="reference", passes=None)(**feeds)["y"]
        got = gradc.compile(g, target="cuda", passes=None, cache_dir=cache)(**feeds)["y"]
        same = got.shape == want.shape and np.array_equal(got.view(np.uint32),
                                                          want.view(np.uint32))
        ok &= same
        if not same:
            print(f"NOT bit-exact: {g.name}", flush=True)
    print(f"exact: {len(graphs)} small-shape kernels vs the reference target: "
          f"{'all bit-identical' if ok else 'MISMATCH'}\n", flush=True)
    return ok


def sweep(spec: str, n: int, args: argparse.Namespace, arch: str,
          rng: np.random.Generator) -> None:
    """Every tile shape of the named layers' kernels at batch ``n`` (the 12 fastest)."""
    for item in spec.split(","):
        set_name, layer_name, *kind_name = item.split("/")
        L = next(x for x in SETS[set_name] if x.name == layer_name)
        for kind in kind_name or KINDS:
            g, shapes = conv_graph(L, n, kind)
            every: list[tiling.Tile | None] = [None, *tiling.tiles("float")]
            precompile([g] * len(every), arch, args.cache, every, args.sums)
            feeds = feeds_for(shapes, rng)
            results = []
            for t in every:
                with forced_tile(t):
                    ex = gradc.compile(g, target="cuda", passes=None, cache_dir=args.cache,
                                       sums=args.sums)
                ex(**feeds)
                name = f"{tile_of(ex)}{' (chosen)' if t is None else ''}"
                results.append((time_gradc(ex, args.reps), name))
            print(f"\nsweep {item} {kind} batch {n}: ms per tile, fastest first")
            best = sorted(results)[:12]
            for sec, name in best + [r for r in results if "chosen" in r[1] and r not in best]:
                print(f"  {name:32} {sec * 1e3:.4f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="8,64")
    ap.add_argument("--sets", default="resnet18,unet,gemm")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sweep", default="")
    ap.add_argument("--cache", default=default_cache_dir())
    ap.add_argument("--sums", default="canonical", choices=("canonical", "split"),
                    help="the cuda target's sums option for the timed kernels (the exact "
                         "checks are canonical)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    rng = np.random.default_rng(0)
    batches = [int(b) for b in args.batches.split(",")]
    sets = args.sets.split(",")
    print(f"{torch.cuda.get_device_name()} ({arch}), torch {torch.__version__}, TF32 off, "
          f"gradc sums={args.sums}\n")
    small = small_graphs()
    jobs: list[tuple[str, int, Any, Any, Any, int]] = []
    for n in batches:
        for name in sets:
            if name == "gemm":
                for gname, a, b, ta, tb in GEMMS:
                    if "B" not in a + b and n != batches[0]:
                        continue  # no batch axis: once
                    g, shapes = gemm_graph(gname, a, b, ta, tb, n)
                    k = g.nodes[-1].inputs[0].type.shape[0 if ta else 1]

                    def tfn(t: dict, ta: bool = ta, tb: bool = tb) -> Callable[[], Any]:
                        return lambda: torch.matmul(t["a"].t() if ta else t["a"],
                                                    t["b"].t() if tb else t["b"])
                    jobs.append((f"gemm {gname} (B={n})", n, g, shapes, tfn, k))
                continue
            for L in SETS[name]:
                for kind in KINDS:
                    g, shapes = conv_graph(L, n, kind)
                    terms = {"fwd": L.ci * L.k ** 2, "dgrad": L.co * L.k ** 2,
                             "wgrad": n * L.out ** 2}[kind]
                    jobs.append((f"{name} {L.name} {L.ci}->{L.co} {L.k}x{L.k}/{L.s} "
                                 f"@{L.hw} {kind}", n, g, shapes,
                                 lambda t, L=L, kind=kind: torch_conv(L, kind, t), terms))
    seconds = precompile([g for g, _ in small], arch, args.cache)
    seconds += precompile([j[2] for j in jobs], arch, args.cache, sums=args.sums)
    print(f"NVRTC: {len(small) + len(jobs)} kernels in {seconds:.1f} s (parallel, cached)\n")
    ok = exact_checks(small, args.cache, rng)
    print("| kernel | batch | tile | gradc ms | GFLOP/s | torch ms | GFLOP/s | torch/gradc | "
          "bound |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    totals: dict[int, list[float]] = {}
    for label, n, g, shapes, tfn, terms in jobs:
        row, good = run_one(g, shapes, tfn, terms, args, rng)
        ok &= good
        print(f"| {label} | {n} {row}", flush=True)
        cells = row.split("|")
        if "gemm" not in label:
            t = totals.setdefault(n, [0.0, 0.0])
            t[0] += float(cells[2])
            t[1] += float(cells[4])
    for n, (tg, tt) in totals.items():
        print(f"\nbatch {n}: convolution kernels sum {tg:.3f} ms (gradc), {tt:.3f} ms (torch), "
              f"ratio {tt / tg:.2f}")
    if args.sweep:
        sweep(args.sweep, batches[0], args, arch, rng)
    print(f"\nbench_gpu_gemm: {'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
