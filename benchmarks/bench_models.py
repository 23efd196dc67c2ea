"""Times whole training steps of real models: gradc's C target beside PyTorch eager and
torch.compile, with GFLOP/s against the machine's peak, memory, and a per-kernel profile.

    python benchmarks/bench_models.py [--models resnet18,mobilenet_v2,squeezenet1_0,unet,mlp,gpt]
        [--batch 8] [--size 64] [--width 1] [--optimizer adamw|adam|sgd] [--steps 3] [--rounds 3]
        [--threads 2] [--compile-warmup 3] [--compile-omp-wait passive|default]
        [--omp-wait default|passive]
        [--profile-steps 6]

    quick run: python benchmarks/bench_models.py --width 8 --size 32 --rounds 1

    the GPT alone: python benchmarks/bench_models.py --models gpt

A step is forward, cross-entropy loss, backward and optimizer update, in float32, on one batch
(``--batch``, default 8) of tests/real_models.py's models (torchvision's resnet18, mobilenet_v2
and squeezenet1_0 and a UNet at 3x``--size``x``--size``, an MLP at 3x32x32), and of
benchmarks/gpt_model.py's GPT (nanoGPT-style: 4 layers, width 256, 4 heads, context 128,
vocabulary 4096 with tied embeddings; token-level cross-entropy, gradc's ``class_axis=2``,
PyTorch's on the logits viewed as ``[batch * context, vocab]``). The models, their
export and the peers' steps are benchmarks/bench_train_step.py's (imported as ``bts``): the
model is exported in training mode (``ts_train``), imported by ``gradc.from_onnx`` and given to
``gradc.Trainer(g, opt, loss="cross_entropy", target="c", threads=T)``; PyTorch eager runs
``F.cross_entropy(model(x))``, ``backward()``, ``optimizer.step()``, ``zero_grad()`` with
``torch.set_num_threads(T)``; torch.compile does the same with ``torch.compile(model)`` (the
default backend, inductor; the loss and the optimizer stay eager). torch.compile's process runs
with OMP_WAIT_POLICY=PASSIVE (``--compile-omp-wait``): its compiled kernels' OpenMP threads and
PyTorch's own pool otherwise spin against each other on 2 cores (quick MLP step: 180 ms with
the default policy, 1.5 ms passive; PyTorch eager's step takes 2-6 ms either way). On a
machine loaded by other processes, OpenMP threads that spin at a barrier take the CPU from the
thread they wait for; ``--omp-wait passive`` runs every peer's process with
OMP_WAIT_POLICY=PASSIVE (the GPT's 2-thread steps on a machine with 6-8 runnable processes:
gradc C and PyTorch eager 2.4-4.3 s with the default policy). Optimizer:
AdamW(lr 1e-3, weight_decay 0.01) by default, or SGD(lr 0.01, momentum 0.9) or Adam(lr 1e-3), on
every side (PyTorch's optimizers with their defaults: on CPU tensors the per-parameter loop);
dropout p=0; every step trains on the same batch.

Timing: each peer runs in its own process (``worker``; in one process the OpenMP runtimes of
gradc's C code and of PyTorch slow each other down). A peer is built, then warmed up: 1 step
(gradc, eager) or ``--compile-warmup`` steps (torch.compile, whose first steps compile the
forward and backward graphs: that time is reported, not timed). The peers are then timed in
``--rounds`` interleaved rounds, one peer running at a time: per round and peer, 1 untimed step
then ``--steps`` timed steps, the order rotating from round to round, so that a drift of the
machine reaches every peer alike. The tables give the median and min per step; the ratios are
PyTorch's median over gradc C's (above 1: gradc is faster). A peer that fails (torch.compile
without a working C++ compiler, say) leaves a one-line reason in its row.

GFLOP/s: the FLOPs of one step are counted on the Trainer's step graph (``tr.step_graph``, fused
bodies included): ``convolution`` forward 2 * |y| * Cin/groups * |kernel|, backward (the
transpose) 2 * |x| * Cout/groups * |kernel| (x: the node's first operand), ``convolution_filter_
grad`` 2 * |filter| * |positions iterated| * batch (dy's positions forward, x's backward),
``gemm`` 2 * |y| * K; elementwise work, reductions and normalization are not counted (for
resnet18 and the MLP at ``--width 8 --size 32`` the count equals torch.utils.flop_counter's
for PyTorch's forward + backward). The peak is measured once per run by benchmarks/bench_gemm.py's
register-only C loop on T threads: with separate vector multiplies and adds (the ceiling of
gradc's ``-ffp-contract=off`` code) and with FMAs; "% peak" is gradc C's GFLOP/s over each.
The memory bandwidth is a STREAM triad's (benchmarks/stream_triad.c through bench_kernels.py's
probe, 3 arrays of 16 Mi floats, T threads, best of 5). Both are measured before the models,
on the machine as loaded as it is then: the load averages and the CPU time other processes
took during the run are printed with them.

Memory: gradc C's planned arena of intermediates (``tr.executable.arena_bytes``, allocated once
and reused by every step) and its state (parameters, optimizer state, running statistics:
``bts.state_bytes``); for every peer's process the peak RSS (ru_maxrss: Python, torch, the
model's export and the peer) and the growth of the resident set over the warm-up (peak
resident during the warm-up steps, VmHWM reset through /proc/self/clear_refs just before them,
minus the resident set before them: gradients, optimizer state, arena, PyTorch's saved
activations, torch.compile's compilation). Later steps reuse memory that the allocators keep
resident, so the same measure over the timed steps reads 0 and is not reported.

Profile: after the timed rounds, with the other peers' processes gone, the C peer builds a
second Trainer with ``profile=True`` (a clock read around every kernel, so it never runs in the
timed rounds), makes untimed steps (at least 3 and 0.5 s), zeroes the counters
(``executable.profile(reset=True)``), runs ``--profile-steps`` steps and prints its ten slowest
kernels per model (``executable.profile()``): ms per step, % of the profiled step's wall time,
and what the kernel computes; then every kernel grouped by what it computes
(benchmarks/kernel_groups.py: products, attention, loss, softmax, layer norm, GELU, embedding,
optimizer, data movement, other). Its wall time per step is printed beside the unprofiled median:
on a busy machine the two can differ widely (2-thread kernels wait for a descheduled thread).

onnxruntime-training is not timed: it is a separate onnxruntime build (``import
onnxruntime.training`` is tried in a subprocess and its result reported).
Progress goes to stderr, the Markdown report to stdout.
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import gradc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_train_step as bts  # noqa: E402  (models, export, peers' steps, one place)
import bench_kernels  # noqa: E402  (the STREAM triad probe, the CPU-load gauge)
import gpt_model  # noqa: E402  (the GPT)
from kernel_groups import group_table  # noqa: E402

load, machine = bts.load, bts.machine   # bench_grads's, re-exported for older imports

MODELS = (*bts.MODELS, "gpt")
C, EAGER, COMPILED = "c", "torch", "compile"
PEERS = (C, EAGER, COMPILED)
LABEL = {C: "gradc C", EAGER: "PyTorch eager", COMPILED: "torch.compile"}
TOP = 10   # kernels per model in the profile table
ORT_NOTE = "onnxruntime-training: not installed (it needs its own runtime)"


# ---------------------------------------------------------------- FLOPs and peak

def _size(shape: Any) -> int:
    """The number of elements of a static shape."""
    return math.prod(int(d) for d in shape)


def step_flops(g: gradc.Graph) -> float:
    """FLOPs of one call of ``g``: its convolutions, filter gradients and gemms (fused bodies
    included), as the module docstring counts them."""
    total = 0.0
    for n in g.nodes:
        if n.body is not None:
            total += step_flops(n.body)
        elif n.op == "convolution":
            x, w, y = n.inputs[0].type.shape, n.inputs[1].type.shape, n.outputs[0].type.shape
            groups = int(n.attrs["group_count"])
            if n.attrs["direction"] == "forward":
                total += 2.0 * _size(y) * (int(x[1]) // groups) * _size(w[2:])
            else:
                total += 2.0 * _size(x) * (int(y[1]) // groups) * _size(w[2:])
        elif n.op == "convolution_filter_grad":
            x, dy = n.inputs[0].type.shape, n.inputs[1].type.shape
            it = dy if n.attrs["direction"] == "forward" else x
            total += 2.0 * _size(n.attrs["output_sizes"]) * _size(it[2:]) * int(it[0])
        elif n.op == "gemm":
            a = n.inputs[0].type.shape
            k = int(a[-2]) if n.attrs["trans_a"] else int(a[-1])
            total += 2.0 * _size(n.outputs[0].type.shape) * k
    return total


def peaks(threads: int) -> tuple[float, float]:
    """(mul+add, FMA) peak GFLOP/s of bench_gemm.py's register-only loop on ``threads``."""
    saved = dict(os.environ)
    try:
        import bench_gemm   # sets OPENBLAS/OMP_NUM_THREADS on import: not for our peers
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return bench_gemm.peak("muladd", threads), bench_gemm.peak("fma", threads)


def ort_training() -> str:
    """The onnxruntime-training note: tried in a subprocess, never installed here."""
    code = "import onnxruntime, onnxruntime.training; print(onnxruntime.__version__)"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"onnxruntime-training: could not be tried ({bts.why(e)})"
    if r.returncode:
        return ORT_NOTE
    return (f"onnxruntime-training: importable (onnxruntime {r.stdout.strip()}) but not timed "
            "by this benchmark")


# ---------------------------------------------------------------- resident memory

def _status_kib(key: str) -> float:
    """A field of /proc/self/status in KiB (NaN if unreadable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


def reset_hwm() -> float:
    """Reset the peak resident set (VmHWM) to the current one; returns the current RSS in
    MiB, or NaN if the kernel does not allow the reset."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return float("nan")
    return _status_kib("VmRSS") / 1024


def hwm_growth(before_mib: float) -> float:
    """MiB of peak resident set (VmHWM) above ``before_mib`` (a ``reset_hwm`` result)."""
    return _status_kib("VmHWM") / 1024 - before_mib


# ---------------------------------------------------------------- the peers

def build(name: str, args: argparse.Namespace) -> bts.Model:
    """One model: the GPT (its batch from ``--batch``) or one of bench_train_step's."""
    if name == "gpt":
        return gpt_model.build(gpt_model.Config(batch=args.batch))
    return bts.build(name, args)


def compiled_step(m: bts.Model, args: argparse.Namespace) -> Callable[[], float]:
    """PyTorch's step with ``torch.compile(model)`` (the loss and the optimizer eager)."""
    model = copy.deepcopy(m.torch_model).train()
    fast = torch.compile(model)
    opt = bts.torch_optimizer(args.optimizer, model.parameters())

    def step() -> float:
        loss = m.torch_loss(fast(m.x), m.labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def profiled(m: bts.Model, args: argparse.Namespace, cache: str | None) -> dict[str, Any]:
    """A second C Trainer with ``profile=True``: untimed steps (at least 3, and 0.5 s), counters
    zeroed, then ``--profile-steps`` steps; its kernels (slowest first) and its mean wall time
    per step."""
    opts: dict[str, Any] = {"cache_dir": cache} if cache is not None else {}
    tr = gradc.Trainer(m.graph, bts.gradc_optimizer(args.optimizer), loss="cross_entropy",
                       target="c", threads=args.threads, profile=True,
                       class_axis=m.class_axis, **opts)
    batch = {"x": m.x.numpy(), "labels": m.labels.numpy()}
    t0, n = time.perf_counter(), 0
    while n < 3 or (time.perf_counter() - t0 < 0.5 and n < 100):   # past the compiler's load
        tr.step(**batch)
        n += 1
    tr.executable.profile(reset=True)
    t0 = time.perf_counter()
    for _ in range(args.profile_steps):
        tr.step(**batch)
    wall = (time.perf_counter() - t0) / args.profile_steps
    logits = "x".join(str(d) for d in m.graph.outputs[0].type.shape)
    return {"kernels": tr.executable.profile(), "wall_s": wall, "steps": args.profile_steps,
            "logits": logits}


def worker(conn: Any, name: str, key: str, args: argparse.Namespace, cache: str | None) -> None:
    """One peer in its own process: build and warm it up, then answer the parent's requests
    ("steps", n) and ("stop",) (the C peer then runs the profile) until told to stop."""
    torch.set_num_threads(args.threads)
    m = build(name, args)
    info: dict[str, Any] = {"params": m.params}
    t0 = time.perf_counter()
    try:
        if key == COMPILED:
            step, tr = compiled_step(m, args), None
        else:
            step, tr = bts.make_step(m, key, args, cache)
        if tr is not None:
            info.update(build_s=time.perf_counter() - t0, flops=step_flops(tr.step_graph),
                        arena_bytes=tr.executable.arena_bytes, state_bytes=bts.state_bytes(tr))
        before = reset_hwm()
        t0 = time.perf_counter()
        info["first_loss"] = step()
        for _ in range(args.compile_warmup - 1 if key == COMPILED else 0):
            step()
        info["warmup_mib"] = hwm_growth(before)
        if key == COMPILED:
            info["build_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - any failure of a peer is reported in its row
        conn.send({"status": f"skipped: {bts.why(e)}"})
        return
    conn.send(info)
    while True:
        msg = conn.recv()
        if msg[0] == "steps":
            gc.collect()
            gc.disable()
            try:
                step()   # untimed: lets the other processes' idle threads settle
                times = []
                for _ in range(msg[1]):
                    t0 = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - t0)
            finally:
                gc.enable()
            conn.send({"times": times})
        else:
            reply: dict[str, Any] = {
                "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
            if key == C:
                try:
                    reply["profile"] = profiled(m, args, cache)
                except Exception as e:  # noqa: BLE001 - reported instead of the table
                    reply["profile"] = {"status": f"failed: {bts.why(e)}"}
            conn.send(reply)
            return


@dataclass
class Peer:
    """One peer on one model, as the parent sees it."""

    times: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    status: str = ""
    conn: Any = None
    proc: Any = None

    def ms(self) -> tuple[float, float] | None:
        """(median, min) ms per step, or None if the peer has no times."""
        if not self.times:
            return None
        return 1e3 * float(np.median(self.times)), 1e3 * min(self.times)


def ask(p: Peer, msg: tuple[Any, ...]) -> dict[str, Any] | None:
    """Send a request to a peer's process; None (and the peer stopped, with a status) if the
    process died."""
    try:
        p.conn.send(msg)
        return p.conn.recv()
    except (EOFError, OSError):
        p.proc.join()
        p.status = f"skipped: its process died (exit code {p.proc.exitcode})"
        p.conn = None
        return None


def run_model(name: str, args: argparse.Namespace, cache: str | None) -> dict[str, Peer]:
    """Start the peers' processes one after the other, time them in interleaved rounds, then
    stop them (the C peer profiles on the way out)."""
    ctx = mp.get_context("spawn")
    peers: dict[str, Peer] = {}
    for key in PEERS:
        parent, child = ctx.Pipe()
        p = Peer(conn=parent, proc=ctx.Process(target=worker,
                                               args=(child, name, key, args, cache)))
        saved = os.environ.get("OMP_WAIT_POLICY")
        if (key == COMPILED and args.compile_omp_wait == "passive") or args.omp_wait == "passive":
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"   # read by the child's OpenMP runtimes
        try:
            p.proc.start()
        finally:
            if saved is None:
                os.environ.pop("OMP_WAIT_POLICY", None)
            else:
                os.environ["OMP_WAIT_POLICY"] = saved
        child.close()
        try:
            p.info = parent.recv()
        except EOFError:
            p.info = {"status": "skipped: its process died while building"}
        p.status = p.info.pop("status", "")
        peers[key] = p
        if p.status:
            p.proc.join()
            p.conn = None
        print(f"[bench] {name} {key}: " + (p.status or f"ready (first loss "
                                            f"{p.info['first_loss']:.6f})"),
              file=sys.stderr, flush=True)
    for r in range(args.rounds):
        keys = [k for k in PEERS if peers[k].conn is not None]
        turn = r % max(1, len(keys))
        for key in keys[turn:] + keys[:turn]:
            reply = ask(peers[key], ("steps", args.steps))
            if reply is not None:
                peers[key].times += reply["times"]
    for key in (EAGER, COMPILED, C):   # C last: its profile runs with the others gone
        p = peers[key]
        if p.conn is None:
            continue
        reply = ask(p, ("stop",))
        if reply is not None:
            p.info.update(reply)
            p.proc.join()
            p.conn = None
        ms = p.ms()
        if ms is not None:
            print(f"[bench] {name} {key}: median {ms[0]:.1f} ms/step", file=sys.stderr,
                  flush=True)
    return peers


# ---------------------------------------------------------------- the report

def fmt(x: Any, spec: str = ".1f") -> str:
    """A number, or '-' when missing or not finite."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


def time_table(results: dict[str, dict[str, Peer]], peak_ma: float, peak_fma: float
               ) -> list[str]:
    """Table 1: ms per step of every peer, the ratios and gradc C's GFLOP/s."""
    lines = ["| model | params | GFLOP/step | gradc C ms median / min | PyTorch eager ms median "
             "/ min | torch.compile ms median / min | eager / C | compile / C | gradc C "
             "GFLOP/s | % mul+add peak | % FMA peak | notes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, peers in results.items():
        ms = {k: p.ms() for k, p in peers.items()}
        params = next((p.info["params"] for p in peers.values() if "params" in p.info), None)
        flops = peers[C].info.get("flops")
        cells = [name, fmt(params / 1e6 if params else None, ".2f") + "M",
                 fmt(flops / 1e9 if flops else None, ".3f")]
        cells += [f"{v[0]:.1f} / {v[1]:.1f}" if v else "-" for v in ms.values()]
        c = ms[C][0] if ms[C] else None
        for key in (EAGER, COMPILED):
            cells.append(f"{ms[key][0] / c:.2f}" if c and ms[key] else "-")
        rate = flops / c * 1e3 / 1e9 if c and flops else None
        cells += [fmt(rate), fmt(100 * rate / peak_ma if rate else None, ".1f"),
                  fmt(100 * rate / peak_fma if rate else None, ".1f")]
        cells.append("; ".join(f"{LABEL[k]} {p.status}" for k, p in peers.items() if p.status))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def setup_table(results: dict[str, dict[str, Peer]]) -> list[str]:
    """Table 2: build and warm-up times, and the first step's loss against PyTorch eager's."""
    lines = ["| model | gradc C build s (training_step + compile) | torch.compile warm-up s "
             "(compiling steps) | PyTorch eager first loss | gradc C first-loss diff "
             "| torch.compile first-loss diff |", "|---|---:|---:|---:|---:|---:|"]
    for name, peers in results.items():
        base = peers[EAGER].info.get("first_loss")
        diffs = []
        for key in (C, COMPILED):
            loss = peers[key].info.get("first_loss")
            diffs.append(fmt(abs(loss - base) if loss is not None and base is not None
                             else None, ".1e"))
        lines.append(f"| {name} | {fmt(peers[C].info.get('build_s'), '.2f')} | "
                     f"{fmt(peers[COMPILED].info.get('build_s'), '.1f')} | "
                     f"{fmt(base, '.5f')} | {diffs[0]} | {diffs[1]} |")
    return lines


def memory_table(results: dict[str, dict[str, Peer]]) -> list[str]:
    """Table 3: gradc C's arena and state, and every peer process's resident memory."""
    mib = 1 / 2 ** 20
    lines = ["| model | peer | gradc arena MiB | gradc state MiB | process peak RSS MiB "
             "| RSS growth over warm-up MiB |",
             "|---|---|---:|---:|---:|---:|"]
    for name, peers in results.items():
        for i, (key, p) in enumerate(peers.items()):
            inf = p.info
            arena = inf.get("arena_bytes")
            state = inf.get("state_bytes")
            lines.append(f"| {name if i == 0 else ''} | {LABEL[key]} | "
                         f"{fmt(arena * mib if arena is not None else None, '.2f')} | "
                         f"{fmt(state * mib if state is not None else None, '.2f')} | "
                         f"{fmt(inf.get('rss_mib'), '.0f')} | {fmt(inf.get('warmup_mib'))} |")
    return lines


def profile_tables(results: dict[str, dict[str, Peer]]) -> list[str]:
    """Tables 4: the ten slowest kernels of gradc C's profiled step, per model."""
    out: list[str] = []
    for name, peers in results.items():
        prof = peers[C].info.get("profile")
        out += ["", f"### {name}: gradc C kernels (profile=True)", ""]
        if not prof or "kernels" not in prof:
            out.append(f"no profile: {(prof or {}).get('status', peers[C].status or 'none')}")
            continue
        steps, wall = prof["steps"], prof["wall_s"]
        total = sum(k["seconds"] for k in prof["kernels"]) / steps
        med = peers[C].ms()
        out += [f"profiled step {1e3 * wall:.2f} ms wall (mean of {steps} steps; unprofiled "
                f"median {fmt(med[0] if med else None, '.2f')} ms); all "
                f"{len(prof['kernels'])} kernels together {1e3 * total:.2f} ms "
                f"({100 * total / wall:.0f}% of the wall time)", "",
                "| kernel | ms/step | % of step | calls/step | what |",
                "|---|---:|---:|---:|---|"]
        for k in prof["kernels"][:TOP]:
            s = k["seconds"] / steps
            out.append(f"| {k['kernel']} | {1e3 * s:.3f} | {100 * s / wall:.1f} | "
                       f"{k['calls'] / steps:g} | {k['what'].replace('|', '/')} |")
        out += ["", "Every kernel, grouped:", "",
                *group_table(prof["kernels"], steps, wall, prof.get("logits"))]
    return out


# ---------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bts.model_arguments(ap)
    bts.optimizer_argument(ap, "adamw", ": issue 13's step is forward, backward, AdamW")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads for PyTorch and gradc's C target (default 2)")
    ap.add_argument("--compile-warmup", type=int, default=3,
                    help="untimed steps of torch.compile before timing (default 3)")
    ap.add_argument("--compile-omp-wait", choices=("passive", "default"), default="passive",
                    help="OMP_WAIT_POLICY of torch.compile's process: passive (default; its "
                    "two OpenMP thread pools spin against each other otherwise) or the default")
    ap.add_argument("--omp-wait", choices=("default", "passive"), default="default",
                    help="OMP_WAIT_POLICY of every peer's process: unchanged (default) or "
                    "passive (threads sleep at once at a barrier: for a loaded machine)")
    ap.add_argument("--profile-steps", type=int, default=6,
                    help="steps of gradc C's profiled run (default 6)")
    ap.set_defaults(models=",".join(MODELS))
    args = ap.parse_args(argv)
    args.models = [s for s in args.models.split(",") if s]
    bad = sorted(set(args.models) - set(MODELS))
    if bad or not args.models or min(args.batch, args.size, args.width, args.steps,
                                     args.rounds, args.threads, args.compile_warmup,
                                     args.profile_steps) < 1:
        ap.error(f"unknown {bad}" if bad else "numbers must be >= 1, and a model is needed")
    return args


def main(argv: list[str] | None = None) -> None:
    """Measure the peak, build and time every model, then print the report."""
    args = parse_args(argv)
    start, load_before = time.perf_counter(), load()
    print("[bench] measuring the peak ...", file=sys.stderr, flush=True)
    cpu = bench_kernels.CpuLoad()
    peak_ma, peak_fma = peaks(args.threads)
    triad = bench_kernels.Triad(1 << 24, [args.threads])
    triad.probe(5)
    ort_note = ort_training()
    results: dict[str, dict[str, Peer]] = {}
    with tempfile.TemporaryDirectory(prefix="gradc-bench-cc-") as cache:
        for name in args.models:
            results[name] = run_model(name, args, cache)
    opt = bts.OPTIMIZERS[args.optimizer]
    out = ["# Whole training step (forward + cross-entropy + backward + optimizer update), "
           "float32: gradc C vs PyTorch eager and torch.compile", "",
           "- command: `" + " ".join(["python benchmarks/bench_models.py",
                                      *(sys.argv[1:] if argv is None else argv)]) + "`",
           *machine(args.threads),
           f"- peak single precision, {args.threads} threads (bench_gemm.py's register-only "
           f"loop, best of 5): mul+add {peak_ma:.1f} GFLOP/s, FMA {peak_fma:.1f} GFLOP/s",
           f"- memory bandwidth, {args.threads} threads (STREAM triad of stream_triad.c, 3 "
           f"arrays of 16 Mi floats, best of 5): {triad.bandwidth(args.threads):.1f} GB/s",
           f"- batch {args.batch}, CNN input 3x{args.size}x{args.size} (MLP 3x32x32), width "
           f"divisor {args.width}; optimizer {opt}; dropout p=0",
           f"- timing: one process per peer; warm-up 1 step (torch.compile: "
           f"{args.compile_warmup}; its process with OMP_WAIT_POLICY "
           f"{'PASSIVE' if args.compile_omp_wait == 'passive' else 'unchanged'}; every "
           f"peer's: {'PASSIVE' if args.omp_wait == 'passive' else 'unchanged'}), then "
           f"{args.rounds} interleaved rounds of 1 untimed + "
           f"{args.steps} timed steps per peer (rotating order, one peer at a time); whole "
           f"run {time.perf_counter() - start:.0f} s",
           f"- load average (1/5/15 min): before {load_before}, after {load()}; "
           f"{cpu.summary()}",
           f"- {ort_note}", "",
           "Legend: ms per step median / min of the timed steps; eager / C and compile / C = "
           "PyTorch's median / gradc C's median (above 1: gradc is faster); GFLOP/step counts "
           "the step graph's convolutions, filter gradients and gemms (see the module "
           "docstring); % peak = gradc C's GFLOP/s / the peak above (mul+add: the ceiling of "
           "gradc's code compiled with -ffp-contract=off).", "",
           "## Time per step", "", *time_table(results, peak_ma, peak_fma), "",
           "## Setup", "", *setup_table(results), "",
           "first-loss diff: |first step's loss - PyTorch eager's| (same initial weights and "
           "batch).", "",
           "## Memory", "", *memory_table(results), "",
           "gradc arena: the C step's planned arena of intermediates (tr.executable.arena_bytes,"
           " allocated once); gradc state: parameters, optimizer state and running statistics "
           "(updated in place). Process peak RSS: ru_maxrss of the peer's process (Python, "
           "torch, the model's export, the peer). RSS growth over warm-up: peak resident set "
           "during the warm-up steps (VmHWM, reset just before them) minus the resident set "
           "before them (gradients, optimizer state, arena, activations; torch.compile: also "
           "compilation).", "",
           "## gradc C per-kernel profile (a separate profile=True Trainer, after the timed "
           "rounds)", "",
           f"Top {TOP} kernels per model; ms/step and calls/step averaged over the profiled "
           "steps; % of step = kernel time / the profiled step's wall time.",
           *profile_tables(results)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
