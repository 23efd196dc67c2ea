"""Times one whole training step (forward + loss + backward + optimizer update) of real models
on gradc's Trainer (targets c, numpy, onnx) beside PyTorch eager.

    python benchmarks/bench_train_step.py [--models resnet18,mobilenet_v2,squeezenet1_0,unet,mlp]
        [--batch 8] [--size 64] [--width 1] [--targets c,numpy,onnx] [--optimizer sgd|adam|adamw]
        [--steps 3] [--rounds 3] [--threads 2] [--alloc-model resnet18] [--cache]

    quick run: python benchmarks/bench_train_step.py --width 8 --size 32

For each model of tests/real_models.py (torchvision's resnet18, mobilenet_v2 and
squeezenet1_0, a UNet and an MLP), the model is exported by the TorchScript exporter in
training mode without its loss (``ts_train``: batch normalization with its batch statistics and
running-statistics update), imported by ``gradc.from_onnx`` and handed to
``gradc.Trainer(g, opt, loss="cross_entropy", target=T)``: T is "c" (threads=T, parameters and
optimizer state updated in place), "numpy" (NumPy runs as it runs) or "onnx" (stock
onnxruntime, ``intra_op_num_threads``). PyTorch eager does the same step on a copy of the same
model: ``model.train()``, ``F.cross_entropy``, ``loss.backward()``, ``optimizer.step()``,
``zero_grad(set_to_none=True)``, with ``torch.set_num_threads(T)``. The MLP's output is a
LogSoftmax; cross-entropy of it equals its nll_loss (log_softmax is idempotent), on both sides.
Optimizer: ``--optimizer sgd`` is SGD(lr 0.01, momentum 0.9), ``adam`` is Adam(lr 1e-3),
``adamw`` AdamW(lr 1e-3, weight_decay 0.01), on both sides. Dropout probabilities are 0
(``rm.no_dropout``), so every peer computes the same numbers; every peer trains on the same
batch (seed 3) at every step.

"compile s" is the Trainer's construction (``training_step`` + ``gradc.compile``; the C
compiler gets an empty cache directory unless ``--cache``); PyTorch has none ("-").
Each peer runs in its own process (see ``worker``: in one process, gradc's C OpenMP threads,
PyTorch's own OpenMP runtime, onnxruntime's and OpenBLAS's pools slowed each other by up to
50x on 2 cores); the parent drives them one at a time. The first step of every peer is untimed
(warm-up); its loss is compared with PyTorch's first loss ("first-loss diff": |gradc -
PyTorch|, same initial weights). The peers are then timed in interleaved rounds: per round and
peer, one untimed step then ``--steps`` timed steps, the order rotating from round to round
(as benchmarks/bench_grads.py), so that a drift of the machine reaches all peers alike.
Every peer makes the same number of steps, so the loss of the last step is compared too
("last-loss diff": float32 rounding in other orders grows with the steps; mobilenet_v2's
training is so sensitive that PyTorch float32 and float64 differ by 0.1 within 4 steps).
"vs PyTorch" is PyTorch's median divided by the peer's median: above 1, gradc is faster; below
1, slower (0.25 = four times slower).

For the C target the table shows ``trainer.last_step_bytes`` (bytes of state updated in place /
allocated per step). For one model (``--alloc-model``), the c and numpy targets' step is run once
more under ``tracemalloc``: the peak of Python-visible allocations during one step (NumPy arrays:
outputs, and the NumPy target's intermediates) over the bytes of the Trainer's state. The C
target's own intermediates are malloc'd in C and are not seen by tracemalloc (nor is
onnxruntime's arena): the figure shows what a step allocates for its results, i.e. whether it
copies parameters. "peak RSS" is the peak resident memory of each peer's process (ru_maxrss:
Python, torch, the export and the peer).

``--width`` divides every channel count (1: the full torchvision models); ``--size`` is the
CNNs' image side (the MLP always takes 3x32x32). The defaults (full width, 64x64, batch 8,
3 rounds of 1 + 3 steps: 13 steps per peer) took 5.3 minutes on 2 idle AMD EPYC cores (gradc
numpy's full resnet18 step takes 6 s); ``--width 8 --size 32`` takes about 2 minutes, most of
it spent compiling C and starting processes.
Progress goes to stderr, the Markdown report to stdout.
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import multiprocessing as mp
import resource
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

import gradc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import real_models as rm  # noqa: E402  (tests/ is not a package)
from bench_grads import MODELS, load, machine, model_arguments  # noqa: E402  (one place)

logging.getLogger("torch.onnx").setLevel(logging.ERROR)

TARGETS = ("c", "numpy", "onnx")
THREADED = ("c", "onnx")   # the targets that take threads=T
TORCH = "torch"


# ---------------------------------------------------------------- one model

@dataclass
class Model:
    """A model's forward graph, its batch, and PyTorch's copy of it."""

    name: str
    graph: gradc.Graph
    x: torch.Tensor
    labels: torch.Tensor
    torch_model: torch.nn.Module
    params: int
    class_axis: int = 1   # the logits' class axis (gradc's Trainer(class_axis=...))
    torch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy


def build(name: str, args: argparse.Namespace) -> Model:
    """Export and import one model; keep PyTorch's model with the same initial state."""
    model, shape = rm.make(name, args.width, seed=0, size=args.size)
    rm.no_dropout(model)
    x = torch.randn(args.batch, *shape, generator=torch.Generator().manual_seed(3))
    labels = rm.labels_for(name, model, x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    blob = rm.export(model, "ts_train", x, labels)
    model.load_state_dict(state)   # the export's training-mode pass moved the BN running stats
    g = gradc.from_onnx(blob)
    return Model(name, g, x, labels, model.train(),
                 sum(p.numel() for p in model.parameters()))


OPTIMIZERS = {"sgd": "SGD(lr 0.01, momentum 0.9)", "adam": "Adam(lr 1e-3)",
              "adamw": "AdamW(lr 1e-3, weight_decay 0.01)"}


def torch_optimizer(kind: str, params: Any) -> torch.optim.Optimizer:
    """PyTorch's optimizer of ``--optimizer``."""
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    return torch.optim.Adam(params, lr=1e-3)


def gradc_optimizer(kind: str) -> Any:
    """gradc's optimizer of ``--optimizer`` (the same hyperparameters as PyTorch's)."""
    if kind == "sgd":
        return gradc.optim.SGD(0.01, momentum=0.9)
    if kind == "adamw":
        return gradc.optim.AdamW(1e-3, weight_decay=0.01)
    return gradc.optim.Adam(1e-3)


# ---------------------------------------------------------------- the peers

@dataclass
class Peer:
    """One peer on one model, as the parent sees it: times (s), losses and notes."""

    compile_s: float = float("nan")
    times: list[float] = field(default_factory=list)
    first_loss: float = float("nan")
    last_loss: float = float("nan")
    status: str = ""
    last_step_bytes: dict[str, int] | None = None
    rss_mib: float = float("nan")
    conn: Any = None
    proc: Any = None


def why(e: BaseException) -> str:
    """A one-line reason for a skipped target."""
    text = " ".join(str(e).split())
    if len(text) > 150:
        text = text[:70] + " ... " + text[-75:]
    return f"{type(e).__name__}: {text}".rstrip(": ")


def make_step(m: Model, key: str, args: argparse.Namespace, cache: str | None
              ) -> tuple[Callable[[], float], Any]:
    """The step function of one peer (and its Trainer, None for PyTorch)."""
    if key == TORCH:
        model = copy.deepcopy(m.torch_model).train()
        opt = torch_optimizer(args.optimizer, model.parameters())

        def torch_step() -> float:
            loss = m.torch_loss(model(m.x), m.labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()

        return torch_step, None
    opts: dict[str, Any] = {"threads": args.threads} if key in THREADED else {}
    if key == "c" and cache is not None:
        opts["cache_dir"] = cache
    tr = gradc.Trainer(m.graph, gradc_optimizer(args.optimizer), loss="cross_entropy",
                       target=key, class_axis=m.class_axis, **opts)
    batch = {"x": m.x.numpy(), "labels": m.labels.numpy()}
    if sorted(tr.batch_names) != sorted(batch):
        raise gradc.GradcError(f"Trainer: unexpected batch names {tr.batch_names}")
    return (lambda: tr.step(**batch)), tr


def worker(conn: Any, name: str, key: str, args: argparse.Namespace, cache: str | None) -> None:
    """One peer in its own process: build it, make its first step, then answer the parent's
    requests ("steps", n) / ("alloc",) / ("stop",) until told to stop.

    Each peer runs alone in its process because in one process the thread pools of two OpenMP
    runtimes (gradc's C library links the system libgomp, PyTorch its own), onnxruntime's and
    OpenBLAS's got in each other's way on 2 cores: PyTorch's unet step took 515 ms there against
    9 ms alone. The parent still interleaves the peers, one at a time."""
    torch.set_num_threads(args.threads)
    m = build(name, args)
    t0 = time.perf_counter()
    try:
        step, tr = make_step(m, key, args, cache)
    except gradc.GradcError as e:
        conn.send({"status": f"skipped: {why(e)}"})
        return
    compile_s = time.perf_counter() - t0
    first = step()
    conn.send({"compile_s": compile_s if tr is not None else float("nan"),
               "first_loss": first, "params": m.params})
    while True:
        msg = conn.recv()
        if msg[0] == "steps":
            gc.collect()
            gc.disable()
            try:
                last = step()   # untimed: lets the other processes' idle threads settle
                times = []
                for _ in range(msg[1]):
                    t0 = time.perf_counter()
                    last = step()
                    times.append(time.perf_counter() - t0)
            finally:
                gc.enable()
            conn.send({"times": times, "last_loss": last})
        elif msg[0] == "alloc":
            peak, held = traced_step(step)
            conn.send({"peak": peak, "held": held, "state": state_bytes(tr),
                       "last_step_bytes": dict(tr.last_step_bytes)})
        else:
            conn.send({"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                       "last_step_bytes": dict(tr.last_step_bytes) if tr is not None else None})
            return


def run_model(name: str, args: argparse.Namespace, cache: str | None
              ) -> tuple[dict[str, Peer], list[str], int]:
    """Start one process per peer (one after the other, so that builds do not compete), then
    time them in interleaved rounds: per round and peer 1 untimed + ``--steps`` timed steps,
    the order rotating from round to round. Returns the peers, the tracemalloc table (for
    ``--alloc-model``) and the parameter count."""
    ctx = mp.get_context("spawn")
    peers: dict[str, Peer] = {}
    params = 0
    for key in [*args.targets, TORCH]:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(child, name, key, args, cache))
        proc.start()
        reply = parent.recv()
        p = Peer(conn=parent, proc=proc, status=reply.get("status", ""),
                 compile_s=reply.get("compile_s", float("nan")),
                 first_loss=reply.get("first_loss", float("nan")))
        params = reply.get("params", params)
        peers[key] = p
        if p.status:
            proc.join()
            p.conn = None
        print(f"[bench] {name} {key}: "
              + (p.status or f"built in {p.compile_s:.1f} s, first loss {p.first_loss:.6f}"),
              file=sys.stderr, flush=True)
    keys = [k for k, p in peers.items() if p.conn is not None]
    for r in range(args.rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            peers[key].conn.send(("steps", args.steps))
            reply = peers[key].conn.recv()
            peers[key].times += reply["times"]
            peers[key].last_loss = reply["last_loss"]
    alloc: list[str] = []
    if name == args.alloc_model:
        alloc = [f"### Bytes allocated per step (tracemalloc, {name}, one step)", "",
                 "| target | state bytes | peak allocated during the step | allocated and "
                 "still held after it | peak / state | last_step_bytes |",
                 "|---|---:|---:|---:|---:|---|"]
        for key in ("c", "numpy"):
            if key in keys:
                peers[key].conn.send(("alloc",))
                a = peers[key].conn.recv()
                lb = a["last_step_bytes"]
                alloc.append(f"| gradc {key} | {a['state']:,} | {a['peak']:,} | {a['held']:,} "
                             f"| {a['peak'] / a['state']:.3f} | in place {lb['in_place']:,}, "
                             f"allocated {lb['allocated']:,}, copied {lb['copied']:,} |")
    for key in keys:
        p = peers[key]
        p.conn.send(("stop",))
        reply = p.conn.recv()
        p.rss_mib, p.last_step_bytes = reply["rss_mib"], reply["last_step_bytes"]
        p.proc.join()
        p.conn = p.proc = None
        print(f"[bench] {name} {key}: median {1e3 * np.median(p.times):.1f} ms/step",
              file=sys.stderr, flush=True)
    return peers, alloc, params


# ---------------------------------------------------------------- allocation per step

def state_bytes(tr: Any) -> int:
    """Bytes of the Trainer's state: parameters, optimizer state, running statistics."""
    return sum(a.nbytes for k, a in tr.state_dict().items() if k != "step")


def traced_step(step: Callable[[], float]) -> tuple[int, int]:
    """(peak bytes allocated over the start, bytes still held at the end) of one step, as
    tracemalloc sees them (Python and NumPy allocations; not C's malloc nor onnxruntime's)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        step()
        cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base, cur - base


# ---------------------------------------------------------------- the report

def fmt_diff(a: float, b: float) -> str:
    """|a - b| in scientific notation ('nan' if either is not finite)."""
    d = abs(a - b)
    return f"{d:.1e}" if np.isfinite(d) else "nan"


def table(models: dict[str, int], results: dict[str, dict[str, Peer]], peers: list[str]
          ) -> list[str]:
    """The Markdown table: one row per model and peer (``models``: name -> parameters)."""
    lines = ["| model | params | target | compile s | median ms/step | min ms/step "
             "| vs PyTorch | first-loss diff | last-loss diff | peak RSS MiB "
             "| C state bytes in place / allocated per step |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, params in models.items():
        rows = results[name]
        base = rows[TORCH]
        base_ms = 1e3 * float(np.median(base.times)) if base.times else None
        for i, key in enumerate(peers):
            p = rows.get(key)
            if p is None:
                continue
            head = f"{name} | {params / 1e6:.2f}M" if i == 0 else " | "
            label = "PyTorch eager" if key == TORCH else f"gradc {key}"
            if not p.times:
                lines.append(f"| {head} | {label} | - | - | - | - | - | - | - | {p.status} |")
                continue
            med, low = 1e3 * float(np.median(p.times)), 1e3 * min(p.times)
            ratio = f"{base_ms / med:.2f}" if base_ms else "n/a"
            if key == TORCH:
                first = f"({p.first_loss:.4f})"
                last = f"({p.last_loss:.4f})"
            else:
                first = fmt_diff(p.first_loss, base.first_loss)
                last = fmt_diff(p.last_loss, base.last_loss)
            inplace = ""
            if key == "c" and p.last_step_bytes is not None:
                lb = p.last_step_bytes
                inplace = f"{lb['in_place']:,} / {lb['allocated']:,}"
            comp = "-" if key == TORCH else f"{p.compile_s:.2f}"
            lines.append(f"| {head} | {label} | {comp} | {med:.1f} | {low:.1f} "
                         f"| {ratio} | {first} | {last} | {p.rss_mib:,.0f} | {inplace} |")
    return lines


# ---------------------------------------------------------------- main

def optimizer_argument(ap: argparse.ArgumentParser, default: str, why: str = "") -> None:
    """``--optimizer``, one of OPTIMIZERS."""
    ap.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default=default,
                    help="; ".join(f"{k}: {v}" for k, v in OPTIMIZERS.items())
                    + f" (default {default}{why})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_arguments(ap)
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help=f"gradc targets, comma-separated subset of: {', '.join(TARGETS)}")
    optimizer_argument(ap, "sgd")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads for PyTorch and gradc's c and onnx targets (default 2)")
    ap.add_argument("--alloc-model", default="resnet18",
                    help="the model whose per-step allocations tracemalloc measures "
                    "(default resnet18; 'none' to skip; the first model if not among --models)")
    ap.add_argument("--cache", action="store_true",
                    help="reuse gradc's C compile cache (default: an empty one, so that "
                    "'compile s' includes the C compiler)")
    args = ap.parse_args(argv)
    args.models = [s for s in args.models.split(",") if s]
    args.targets = [s for s in args.targets.split(",") if s]
    bad = sorted(set(args.models) - set(MODELS)) + sorted(set(args.targets) - set(TARGETS))
    if bad or not args.models or min(args.batch, args.size, args.width, args.steps,
                                     args.rounds, args.threads) < 1:
        ap.error(f"unknown {bad}" if bad else "numbers must be >= 1, and a model is needed")
    if args.alloc_model != "none" and args.alloc_model not in args.models:
        args.alloc_model = args.models[0]
    return args


def main(argv: list[str] | None = None) -> None:
    """Build and time every model, then print the report."""
    args = parse_args(argv)
    start, load_before = time.perf_counter(), load()
    models: dict[str, int] = {}
    results: dict[str, dict[str, Peer]] = {}
    alloc: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gradc-bench-cc-") as tmp:
        cache = None if args.cache else tmp
        for name in args.models:
            results[name], lines, models[name] = run_model(name, args, cache)
            alloc = alloc or lines
    peers = [*args.targets, TORCH]
    out = ["# gradc whole training step (forward + loss + backward + optimizer update), "
           "float32", "",
           "- command: `" + " ".join(["python benchmarks/bench_train_step.py",
                                      *(sys.argv[1:] if argv is None else argv)]) + "`",
           *machine(args.threads),
           f"- batch {args.batch}, CNN input 3x{args.size}x{args.size} (MLP 3x32x32), width "
           f"divisor {args.width}; export ts_train, Trainer(loss='cross_entropy'); optimizer "
           f"{'SGD(lr 0.01, momentum 0.9)' if args.optimizer == 'sgd' else 'Adam(lr 1e-3)'}; "
           "dropout p=0",
           "- timing: each peer in its own process (see `worker`), built + 1 untimed step, then "
           f"{args.rounds} interleaved rounds of 1 untimed + {args.steps} timed steps per peer "
           f"(rotating order, one peer running at a time); whole run "
           f"{time.perf_counter() - start:.0f} s",
           f"- load average (1/5/15 min): before {load_before}, after {load()}",
           "- vs PyTorch = PyTorch eager's median / the peer's median: above 1, gradc is "
           "faster; below 1, slower",
           "- first-loss diff: |loss of the first step - PyTorch's| (same initial weights; "
           "PyTorch's loss in parentheses); last-loss diff: the same after all "
           f"{1 + args.rounds * (1 + args.steps)} steps",
           "- peak RSS: of the peer's process (the model's export included)",
           "- C state bytes: trainer.last_step_bytes of the C target: bytes of parameters, "
           "optimizer state and running statistics updated in place / newly allocated per step",
           "", *table(models, results, peers)]
    if alloc:
        out += ["", *alloc, "",
                "tracemalloc sees NumPy's allocations (results, and the numpy target's "
                "intermediates), not the generated C code's malloc nor onnxruntime's. "
                "\"Still held\" counts what the step allocated and the Trainer keeps (the "
                "numpy target's new state arrays; the old ones, allocated before tracing "
                "began, are freed but not subtracted)."]
    print("\n".join(out))


if __name__ == "__main__":
    main()
