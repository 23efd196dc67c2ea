"""gradc's cuda target against PyTorch on one GPU: training steps of real models, kernel groups,
and the seed gradient kernels against the GPU's copy bandwidth (issue 28, item 6).

    python3 benchmarks/bench_gpu.py [--models resnet18,mobilenet_v2,squeezenet1_0,unet,mlp,gpt]
        [--batches 8,64] [--sums split] [--quick] [--steps 20] [--out results.md] [--deadline 480]

For each model and batch, one process times a training step (forward, cross-entropy, backward,
AdamW(lr 1e-3, weight_decay 0.01), float32, TF32 off) of:

- **gradc cuda**: ``gradc.Trainer(g, AdamW, loss="cross_entropy", target="cuda", sums=...)``
  with ``g`` the model's TorchScript training export (``tests/real_models.py``'s ``export``,
  dropout at 0) imported by ``gradc.from_onnx``; the batch is a CUDA torch tensor (read in
  place), the step is one CUDA graph replay and the loss (4 bytes) the only value read back.
  ``--sums`` picks the target's summation mode (a comma-separated list runs gradc once per
  mode): ``split`` (the default here: long sums into few outputs -- batch-norm statistics, bias
  gradients, the filter gradients and small convolutions the cost model picks -- added in a
  fixed tree, within the summing ops' error bound, reproducible) or ``canonical`` (every sum in
  the reference's order: bit-identical to the CPU). The report names the mode and, per model,
  how many kernels summed in another order ("reordered");
- **PyTorch eager**, **torch.compile** and **torch.compile(mode="reduce-overhead")** (CUDA graphs)
  of a copy of the same model, ``AdamW(fused=True)``, ``loss.item()`` per step.

Each peer: warm-up steps (the first is the compile, reported as "compile s"), then ``--steps`` timed
steps, each ended by reading the loss: median and min ms; the first step's losses of gradc and eager
(same weights and batch, dropout at 0) should agree to float32 rounding. At batch 64 torch.compile's
default mode is left out unless ``--all-modes`` (the issue's table; it saves minutes of compiling).
"kernels" is the launches of gradc's step (its CUDA graph) and, for eager, the kernels one step runs
(torch.profiler). gradc's step is then run once more with its launches issued one by one (no graph),
a CUDA event after each, and the times summed per kernel group (op or fused group): what the next
bottleneck is. Events between launches add about a microsecond to each.

Seed gradient kernels (``--seed-mb``, default 256 MB per tensor): relu_grad, clip_grad,
slice_grad, max_pooling_grad (2x2, stride 2) and resample_grad (nearest, x2) compiled by gradc
alone, each kernel timed by events (median of 20); "bytes" counts every input read once and the
output written once, "% copy" compares with a device-to-device copy of the same size measured in
the same run (2 x bytes / time).

Models: torchvision's resnet18, mobilenet_v2 and squeezenet1_0 (10 classes, 3x64x64; the copies
in ``tests/real_models.py`` when torchvision is missing), the UNet and the MLP (3x32x32) of
``tests/real_models.py``, and a GPT (6 layers, width 512, 8 heads, context 256, vocabulary
8192, defined here). A model whose export, import or compile fails (gradc lacking an op) is
reported with the reason, and the PyTorch peers still run. ``--deadline`` (seconds) stops
starting new work once passed: the tables then show what finished. The report is Markdown on
stdout (and ``--out``); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import gradc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import real_models as rm  # noqa: E402  (tests/ is not a package)

MODELS = ("resnet18", "mobilenet_v2", "squeezenet1_0", "unet", "mlp", "gpt")
TORCH = ("eager", "compile", "reduce-overhead")
T0 = time.perf_counter()
SUMS_NOTE = {
    "split": "the cuda target with sums=\"split\": long sums into few outputs (batch-norm "
             "statistics and gradients, bias gradients, loss totals; filter gradients and small "
             "convolutions where the cost model expects a gain) added in a fixed tree, and "
             "every gemm and convolution adding its terms with fused multiply-adds, within "
             "the summing ops' error bound, reproducible run to run; every other kernel "
             "bit-exact (\"reordered kernels\" counts the others)",
    "canonical": "the cuda target with sums=\"canonical\": every sum in the reference's "
                 "canonical order, every result bit-identical to the reference (and the C "
                 "target)"}


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- models

class Block(nn.Module):
    """A GPT-2 block: pre-LayerNorm, causal self-attention, GELU MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, 2)
        q, k, v = (a.reshape(n, t, self.heads, d // self.heads).transpose(1, 2) for a in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(n, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final LayerNorm, logits [N, T, V]."""

    def __init__(self, vocab: int = 8192, ctx: int = 256, d: int = 512, layers: int = 6,
                 heads: int = 8) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def make_model(name: str, batch: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor, int]:
    """The model (seed 0), a batch (CPU tensors) and its labels, and the class axis."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    if name == "gpt":
        model = GPT()
        x = torch.randint(0, 8192, (batch, 256), generator=gen)
        return model, x, torch.randint(0, 8192, (batch, 256), generator=gen), -1
    model = None
    if name in ("resnet18", "mobilenet_v2", "squeezenet1_0"):
        try:
            import torchvision  # lazy: the GPU machine has it; elsewhere real_models' copies

            model = getattr(torchvision.models, name)(num_classes=10)
        except ImportError:
            model = None
    if model is None:
        model, _ = rm.make(name, 1, seed=0, size=64)
    shape = (3, 32, 32) if name == "mlp" else (3, 64, 64)
    rm.no_dropout(model)
    x = torch.randn(batch, *shape, generator=gen)
    return model.train(), x, rm.labels_for(name, model, x), 1


def export_graph(name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> gradc.Graph:
    """The model's TorchScript training export, imported (the model's state restored)."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    blob = rm.export(model, "ts_train", x, y)
    model.load_state_dict(state)
    return gradc.from_onnx(blob)


# ---------------------------------------------------------------- timing

def timed(step: Callable[[], float], warmup: int, steps: int) -> dict[str, Any]:
    """Compile (the first call) and warm-up, then ``steps`` timed calls."""
    t = time.perf_counter()
    first = step()
    compile_s = time.perf_counter() - t
    for _ in range(warmup - 1):
        step()
    ms = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        ms.append(1e3 * (time.perf_counter() - t))
    return {"median": statistics.median(ms), "min": min(ms), "compile": compile_s,
            "loss": first}


def torch_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, axis: int,
               graphs: bool) -> Callable[[], float]:
    """One PyTorch training step (AdamW fused); ``graphs``: mark CUDA-graph step boundaries."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)

    def step() -> float:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.cross_entropy(out.movedim(axis, 1) if axis != 1 else out, y)
        loss.backward()
        opt.step()
        return float(loss.item())
    return step


def eager_kernels(step: Callable[[], float]) -> int:
    """The CUDA kernels one eager step launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile  # lazy: only for this count

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA"
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower())


def runner_of(executable: Any) -> Any:
    """The CudaRunner behind an Executable (the last one used, for symbolic shapes)."""
    r = executable._runner
    return next(reversed(r.runners.values())) if hasattr(r, "runners") else r


def launch_times(runner: Any, repeat: int = 3) -> list[float]:
    """ms of each launch of a runner's program, issued one by one without its CUDA graph, a
    CUDA event after each (median over ``repeat`` passes); the arena holds the last call's
    data."""
    drv = runner.driver
    d, stream, ok = drv.d, drv.stream, drv._ok  # the runtime's own error check
    drv._current()
    arg = np.array([runner.arena], np.uint64)
    params = np.array([arg.ctypes.data], np.uint64)
    n = len(runner.functions)
    events = [ok(d.cuEventCreate(0), "cuEventCreate") for _ in range(n + 1)]
    passes = []
    for _ in range(repeat):
        ok(d.cuEventRecord(events[0], stream), "cuEventRecord")
        for i, (fn, grid, block, _) in enumerate(runner.functions):
            ok(d.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream, params.ctypes.data, 0),
               "cuLaunchKernel")
            ok(d.cuEventRecord(events[i + 1], stream), "cuEventRecord")
        ok(d.cuStreamSynchronize(stream), "cuStreamSynchronize")
        passes.append([ok(d.cuEventElapsedTime(events[i], events[i + 1]), "cuEventElapsedTime")
                       for i in range(n)])
    for e in events:
        d.cuEventDestroy(e)
    return [float(np.median([p[i] for p in passes])) for i in range(n)]


def kernel_groups(runner: Any) -> list[tuple[str, int, float]]:
    """(group, launches, ms) per op or fused group of a runner's step, slowest first."""
    times = launch_times(runner)
    groups: dict[str, list[float]] = {}
    for launch, ms in zip(runner.program.launches, times):
        groups.setdefault(launch.label.split(" -> ")[0], []).append(ms)
    return sorted(((k, len(v), sum(v)) for k, v in groups.items()), key=lambda r: -r[2])


# ---------------------------------------------------------------- one model, one batch

def run_model(name: str, batch: int, args: argparse.Namespace, cache: str) -> dict[str, Any]:
    """Every peer's step on one model and batch; failures are recorded as their reason."""
    res: dict[str, Any] = {"model": name, "batch": batch, "peers": {}, "groups": []}
    model, x, y, axis = make_model(name, batch)
    dev = torch.device("cuda")
    xd, yd = x.to(dev), y.to(dev)
    modes = ["eager", "compile", "reduce-overhead"]
    if batch > 8 and not args.all_modes or args.quick:
        modes.remove("compile")
    if over(args):
        return res
    g = None
    for sums in args.sums:  # gradc first: the export needs the CPU model
        peer = gradc_peer(sums)
        try:
            if g is None:
                log(f"{name} b{batch}: export and import")
                g = export_graph(name, model, x, y)
            t = time.perf_counter()
            tr = gradc.Trainer(g, gradc.optim.AdamW(1e-3, weight_decay=0.01),
                               loss="cross_entropy", target="cuda", cache_dir=cache,
                               class_axis=axis, sums=sums)
            build = time.perf_counter() - t
            log(f"{name} b{batch}: gradc sums={sums} compiled in {build:.1f} s")
            r = timed(functools.partial(tr.step, x=xd, labels=yd), args.warmup, args.steps)
            r["compile"] += build
            runner = runner_of(tr.executable)
            r["kernels"] = len(runner.program.launches)
            r["reordered"] = len(runner.program.reordered)
            res["groups"].append((sums, kernel_groups(runner)))
            res["peers"][peer] = r
            del tr, runner
        except Exception as e:  # noqa: BLE001 - reported in the table
            res["peers"][peer] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        gc.collect()
    for mode in modes:
        if over(args):
            break
        log(f"{name} b{batch}: torch {mode}")
        m = copy.deepcopy(model).to(dev).train()
        if mode != "eager":
            m = torch.compile(m, mode="reduce-overhead" if mode != "compile" else None,
                              dynamic=False)
        step = torch_step(m, xd, yd, axis, mode == "reduce-overhead")
        try:
            r = timed(step, args.warmup, args.steps)
            if mode == "eager":
                r["kernels"] = eager_kernels(step)
            res["peers"][mode] = r
        except Exception as e:  # noqa: BLE001 - reported in the table
            res["peers"][mode] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        del m, step
        gc.collect()
        torch.cuda.empty_cache()
    return res


def gradc_peer(sums: str) -> str:
    """The column of gradc in one summation mode."""
    return f"gradc {sums}"


def over(args: argparse.Namespace) -> bool:
    """True once the deadline has passed (new work is skipped)."""
    return time.perf_counter() - T0 > args.deadline


# ---------------------------------------------------------------- seed gradient kernels

def seed_kernels(mb: int, cache: str, sums: str
                 ) -> tuple[float, list[tuple[str, float, float]]]:
    """(copy GB/s, [(kernel, MB moved, median ms)]) on tensors of ``mb`` MB (gathers: the
    same kernels in either summation mode)."""
    from gradc import ops  # lazy: the graphs below

    n = mb * 2 ** 20 // 4
    dev = torch.device("cuda")
    src, dst = torch.empty(n, device=dev), torch.empty(n, device=dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(21):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    copy_gbs = 2 * n * 4 / (statistics.median(ms[1:]) * 1e6)
    del src, dst
    side = int(np.sqrt(n // 1024)) // 2 * 2  # 16 x 64 planes of side x side: about n elements
    shape4 = (16, 64, side, side)
    h, w = side, side
    cases: dict[str, tuple[Callable[..., Any], dict[str, tuple[int, ...]]]] = {
        "relu_grad": (lambda x, dy: ops.relu_grad(x, dy), {"x": (n,), "dy": (n,)}),
        "clip_grad": (lambda x, dy: ops.clip_grad(x, dy, -1.0, 1.0), {"x": (n,), "dy": (n,)}),
        "slice_grad": (lambda dy: ops.slice_grad(dy, (n // 4096, 4096), (0, 0),
                                                 (n // 4096, 4096), (1, 2)),
                       {"dy": (n // 4096, 2048)}),
        "max_pooling_grad": (lambda x, dy: ops.max_pooling_grad(x, dy, (2, 2), (2, 2)),
                             {"x": shape4, "dy": shape4[:2] + (h // 2, w // 2)}),
        "resample_grad": (lambda dy: ops.resample_grad(dy, shape4[:2] + (h // 2, w // 2),
                                                       (1, 1, 2.0, 2.0), "nearest"),
                          {"dy": shape4}),
    }
    rows = []
    for name, (fn, inputs) in cases.items():
        try:
            g = gradc.Graph(name)
            vals = [g.input(k, "float32", s) for k, s in inputs.items()]
            out = fn(*vals)
            g.output(out, "dx")
            ex = gradc.compile(g, target="cuda", cache_dir=cache, keep_on_device=["dx"],
                               sums=sums)
            feeds = {k: torch.randn(s, device=dev) for k, s in inputs.items()}
            ex(**feeds)
            runner = runner_of(ex)
            times = [launch_times(runner, 1) for _ in range(20)]
            t = statistics.median(sum(p) for p in times)
            moved = (sum(int(np.prod(s)) for s in inputs.values())
                     + int(np.prod([int(d) for d in out.type.shape]))) * 4
            rows.append((name, moved / 2 ** 20, t))
            del ex, runner, feeds
        except Exception as e:  # noqa: BLE001 - reported in the table
            rows.append((f"{name} ({type(e).__name__}: {str(e).splitlines()[0][:80]})", 0, 0))
        gc.collect()
        torch.cuda.empty_cache()
    return copy_gbs, rows


# ---------------------------------------------------------------- report

def step_table(results: list[dict[str, Any]], modes: list[str]) -> list[str]:
    """ms per step (median / min), compile s, kernels per step, speed-ups (of the first
    gradc mode), kernels summed in another order than canonical."""
    peers = [gradc_peer(m) for m in modes] + list(TORCH)
    first = peers[0]
    out = ["| model | batch | " + " | ".join(f"{p} ms (min)" for p in peers)
           + f" | {first} / eager | {first} / fastest torch | compile s (gradc, compile, r-o) "
           "| kernels (gradc, eager) | reordered kernels (gradc) | first loss (gradc, eager) |",
           "|---|---:|" + "---:|" * (len(peers) + 6)]
    notes = []
    for res in results:
        p = res["peers"]
        cells = []
        for peer in peers:
            r = p.get(peer)
            cells.append("" if r is None else "refused" if "error" in r
                         else f"{r['median']:.2f} ({r['min']:.2f})")
            if r is not None and "error" in r:
                notes.append(f"- {res['model']} batch {res['batch']}, {peer}: {r['error']}")
        g = p.get(first, {})
        ok = [p[k]["median"] for k in TORCH if k in p and "error" not in p[k]]
        speed = ["", ""]
        if "median" in g and ok:
            if "eager" in p and "median" in p["eager"]:
                speed[0] = f"{p['eager']['median'] / g['median']:.2f}x"
            speed[1] = f"{min(ok) / g['median']:.2f}x"
        comp = ", ".join(f"{p[k]['compile']:.1f}" if k in p and "compile" in p[k] else "-"
                         for k in (first, "compile", "reduce-overhead"))
        kern = ", ".join(str(p.get(k, {}).get("kernels", "-")) for k in (first, "eager"))
        reord = ", ".join(str(p.get(k, {}).get("reordered", "-")) for k in peers[:len(modes)])
        loss = ", ".join(f"{p[k]['loss']:.5g}" if "loss" in p.get(k, {}) else "-"
                         for k in (first, "eager"))
        out.append(f"| {res['model']} | {res['batch']} | " + " | ".join(cells)
                   + f" | {speed[0]} | {speed[1]} | {comp} | {kern} | {reord} | {loss} |")
    return out + ([""] + notes if notes else [])


def group_tables(results: list[dict[str, Any]], top: int) -> list[str]:
    """gradc's kernel groups per model and batch, slowest first."""
    out: list[str] = []
    for res in results:
        for sums, groups in res["groups"]:
            total = sum(ms for _, _, ms in groups)
            out += ["", f"gradc cuda sums={sums}, {res['model']} batch {res['batch']}: "
                    f"{total:.2f} ms in {sum(n for _, n, _ in groups)} launches issued one by one",
                    "", "| kernel group | launches | ms | % |", "|---|---:|---:|---:|"]
            out += [f"| {k} | {n} | {ms:.3f} | {100 * ms / total:.1f} |"
                    for k, n, ms in groups[:top]]
    return out


def seed_table(copy_gbs: float, rows: list[tuple[str, float, float]]) -> list[str]:
    out = [f"Device-to-device copy: {copy_gbs:.0f} GB/s (2 x bytes / time).", "",
           "| seed gradient kernel | MB moved | ms | GB/s | % of copy |",
           "|---|---:|---:|---:|---:|"]
    for name, mb, ms in rows:
        if ms:
            gbs = mb * 2 ** 20 / (ms * 1e6)
            out.append(f"| {name} | {mb:.0f} | {ms:.3f} | {gbs:.0f} | {100 * gbs / copy_gbs:.0f} |")
        else:
            out.append(f"| {name} | | | | |")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated subset of: {', '.join(MODELS)}")
    ap.add_argument("--batches", default="8,64", help="comma-separated batch sizes")
    ap.add_argument("--sums", default="split",
                    help="gradc's summation modes, comma-separated: split (long sums into few "
                    "outputs in a fixed tree, within the summing ops' error bound) and/or "
                    "canonical (bit-identical to the CPU); the first is the one compared")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per peer")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (>= 1)")
    ap.add_argument("--quick", action="store_true",
                    help="5 timed steps, batch 8, no default-mode torch.compile")
    ap.add_argument("--all-modes", action="store_true",
                    help="torch.compile's default mode at every batch (not only at 8)")
    ap.add_argument("--seed-mb", type=int, default=256,
                    help="MB per tensor of the seed gradient kernels (0: skip them)")
    ap.add_argument("--top", type=int, default=8, help="kernel groups shown per model")
    ap.add_argument("--deadline", type=float, default=480.0,
                    help="seconds after which no new work starts")
    ap.add_argument("--cache", default="", help="gradc's CUBIN cache (default: a fresh one)")
    ap.add_argument("--out", default="", help="also write the report to this file")
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.batches = [int(b) for b in args.batches.split(",") if b]
    args.sums = [m for m in args.sums.split(",") if m]
    if not args.sums or set(args.sums) - {"split", "canonical"}:
        ap.error(f"--sums: expected split and/or canonical, got {args.sums}")
    bad = sorted(set(args.models) - set(MODELS))
    if bad or args.warmup < 1 or args.steps < 1:
        ap.error(f"unknown models {bad}" if bad else "--warmup and --steps must be >= 1")
    if args.quick:
        args.steps, args.batches = 5, [b for b in args.batches if b == 8] or args.batches[:1]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_gpu.py: expected a CUDA GPU for PyTorch, got none")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    cache = args.cache or tempfile.mkdtemp(prefix="gradc-bench-gpu-")
    lines = [f"# gradc cuda vs PyTorch: {torch.cuda.get_device_name()}", "",
             f"torch {torch.__version__}, float32, TF32 off, AdamW; {args.steps} timed steps "
             f"after {args.warmup} (median, min in parentheses), ms per step.", "",
             *(f"- gradc {m}: {SUMS_NOTE[m]}" for m in args.sums), ""]
    copy_gbs, seeds = 0.0, []
    if args.seed_mb:
        log(f"seed gradient kernels on {args.seed_mb} MB tensors")
        copy_gbs, seeds = seed_kernels(args.seed_mb, cache, args.sums[0])
    results = []
    for name in args.models:
        for batch in args.batches:
            if over(args):
                log(f"deadline passed: {name} batch {batch} skipped")
                continue
            results.append(run_model(name, batch, args, cache))
    lines += step_table(results, args.sums) + group_tables(results, args.top)
    if seeds:
        lines += [""] + seed_table(copy_gbs, seeds)
    lines += ["", f"Total {time.perf_counter() - T0:.0f} s."]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
