"""Times one training step (forward + backward) of real models on gradc's targets and PyTorch.

    python benchmarks/bench_grads.py [--models resnet18,mobilenet_v2,squeezenet1_0,unet,mlp]
        [--batch 8] [--size 64] [--width 1] [--targets c,numpy,onnx[,reference]]
        [--repeats 5] [--rounds 3] [--threads 2]

For each model of tests/real_models.py (torchvision's resnet18, mobilenet_v2 and
squeezenet1_0, a UNet and an MLP, with their loss: cross_entropy, or nll_loss after the MLP's
LogSoftmax), the model is exported by the TorchScript exporter in training mode with its loss
(``ts_train_loss``), imported by ``gradc.from_onnx`` and differentiated with
``gradc.grad(model, wrt="parameters")``; the cotangent of the loss is 1. One call of that
training graph (the loss and every weight gradient) is timed on each gradc target, beside
PyTorch eager doing the same step: zero the gradients, forward, loss, ``backward()``. Dropout
probabilities are 0 (``rm.no_dropout``) so that every peer computes the same numbers.

Before timing, each target's gradients are checked against gradc's reference target: numpy
and c bit for bit, onnx (onnxruntime) within 1e-3 of the largest gradient; the status column
shows the result, so a wrong target is visible. PyTorch's gradients are compared the same way
for information (float32, other summation orders: expect small differences). With tiny
shapes (batch 2, 32x32) the last batch norms of resnet18 and mobilenet_v2 normalize over 2
values, which amplifies float32 rounding by orders of magnitude: onnx (and PyTorch) then
differ by a few 1e-2 of the largest gradient without being wrong (tests/test_real_models.py
checks onnx in float64 for this reason); at the defaults they agree to about 1e-5. A target that
raises ``gradc.GradcError`` is skipped and its row says why. Each peer is compiled once and
called once before timing; the peers are then timed in interleaved rounds (one untimed call
and ``--repeats`` timed calls per peer per round, the order rotating from round to round, as
benchmarks/bench_kernels.py does), so a drift of the machine reaches all peers alike. The
table gives the median and min per step in ms, the ratio of the median to PyTorch's (above 1:
slower than PyTorch) and GFLOP/s (FLOPs of the PyTorch step counted by
``torch.utils.flop_counter``, divided by the median). ``--width`` divides every channel count:
1 is the full torchvision width, which is slow on a small machine (minutes per model on 2
cores); ``--width 8 --batch 2 --size 32`` gives a quick run. The MLP's input is always 3x32x32.
Progress goes to stderr, the Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch

import gradc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import real_models as rm  # noqa: E402  (tests/ is not a package)

logging.getLogger("torch.onnx").setLevel(logging.ERROR)

MODELS = ("resnet18", "mobilenet_v2", "squeezenet1_0", "unet", "mlp")
TARGETS = ("c", "numpy", "onnx", "reference")
THREADED = ("c", "onnx")   # the targets that take threads=T
ONNX_REL = 1e-3            # onnx: within this fraction of the largest gradient
TORCH = "torch"


# ---------------------------------------------------------------- one model

@dataclass
class Model:
    """A model's training graph, its feeds and reference gradients, and PyTorch's step."""

    name: str
    train: gradc.Graph
    inputs: dict[str, np.ndarray]
    ref: dict[str, np.ndarray]
    torch_step: Callable[[], Any]
    torch_grads: Callable[[], dict[str, np.ndarray]]
    params: int
    flops: float | None = None


def feeds(model_bytes: bytes, g: gradc.Graph, x: torch.Tensor, labels: torch.Tensor
          ) -> dict[str, np.ndarray]:
    """The graph inputs of the training graph, as tests/test_real_models.py builds them: the
    exported inputs, the dropout state the importer adds, and the loss's cotangent of ones."""
    m = onnx.load_from_string(model_bytes)
    inits = {i.name for i in m.graph.initializer}
    arrays = {"x": x.numpy(), "target": labels.numpy()}
    out = {i.name: arrays[i.name] for i in m.graph.input if i.name not in inits}
    if "rng_state" in {v.name for v in g.inputs}:
        out["rng_state"] = np.array([0, 0, 0, 0, 7, 0], np.uint32)
    loss = g.outputs[0]
    seed = gradc.grad_names(g, "parameters").cotangents[loss.name]  # grad_<loss>, or fresh
    out[seed] = np.ones(loss.type.shape, loss.type.dtype.numpy)
    return out


def build(name: str, args: argparse.Namespace) -> Model:
    """Export, import and differentiate one model; set up PyTorch's step on the same data."""
    model, shape = rm.make(name, args.width, size=args.size)
    rm.no_dropout(model)
    x = torch.randn(args.batch, *shape, generator=torch.Generator().manual_seed(3))
    labels = rm.labels_for(name, model, x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    blob = rm.export(model, "ts_train_loss", x, labels)
    model.load_state_dict(state)   # the export's training-mode pass moved the BN running stats
    g = gradc.from_onnx(blob)
    train = gradc.grad(g, wrt="parameters")
    inputs = feeds(blob, g, x, labels)
    ref = gradc.compile(train, target="reference")(**inputs)
    with_loss = rm.WithLoss(model).train()
    params = list(model.named_parameters())

    def step() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = with_loss(x, labels)
        loss.backward()
        return loss

    def grads() -> dict[str, np.ndarray]:
        step()
        return {f"grad_model.{n}": p.grad.numpy().copy() for n, p in params}

    return Model(name, train, inputs, ref, step, grads, sum(p.numel() for _, p in params))


def count_flops(m: Model) -> float | None:
    """FLOPs of one PyTorch step (forward, loss, backward), or None if the counter fails."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc:
            m.torch_step()
        return float(fc.get_total_flops()) or None
    except Exception:  # noqa: BLE001 - GFLOP/s is optional
        return None


# ---------------------------------------------------------------- checking

def check(target: str, got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> str:
    """'bit-exact', 'ok (...)' or 'NO: ...' for a target's gradients against the reference."""
    names = [n for n in ref if n.startswith("grad_")] or list(ref)
    if target == TORCH:   # PyTorch has no gradients for buffers (batch norm running stats)
        names = [n for n in names if n in got]
    missing = [n for n in names if n not in got]
    if missing:
        return f"NO: {len(missing)} outputs missing, e.g. {missing[0]}"
    if target in ("c", "numpy", "reference"):
        bad = [n for n in names if np.asarray(got[n]).dtype != ref[n].dtype
               or not np.array_equal(np.asarray(got[n]).view(np.uint8), ref[n].view(np.uint8))]
        return "bit-exact" if not bad else f"NO: {len(bad)}/{len(names)} differ, e.g. {bad[0]}"
    scale = max(float(np.abs(ref[n]).max()) for n in names if ref[n].size)
    diffs = {n: float(np.abs(np.asarray(got[n], np.float64) - ref[n]).max(initial=0.0))
             for n in names}
    worst = max(diffs, key=diffs.__getitem__)
    rel = diffs[worst] / scale if scale else diffs[worst]
    if target == TORCH:
        return f"info: max diff {rel:.1e} of max |grad| ({worst})"
    if rel <= ONNX_REL:
        return f"ok ({rel:.1e} of max)"
    return f"NO: {rel:.1e} of max > {ONNX_REL:g} ({worst})"


def why(e: BaseException) -> str:
    """A one-line reason for a skipped target."""
    text = " ".join(str(e).split())
    if len(text) > 150:
        text = text[:70] + " ... " + text[-75:]
    return f"{type(e).__name__}: {text}".rstrip(": ")


# ---------------------------------------------------------------- timing

def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, rounds: int
                ) -> dict[str, list[float]]:
    """Time every function in `rounds` rounds of 1 untimed + `repeats` timed calls each, the
    order of the peers rotating from round to round (as bench_kernels.py's ``interleaved``)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                fns[key]()
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    fns[key]()
                    times[key].append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return times


@dataclass
class Row:
    """One peer on one model: its times (s) and check, or why it was skipped."""

    times: list[float] = field(default_factory=list)
    status: str = ""
    setup_s: float = 0.0


def run_model(m: Model, args: argparse.Namespace) -> dict[str, Row]:
    """Compile and check every target, warm up, then time the peers interleaved."""
    rows: dict[str, Row] = {}
    fns: dict[str, Callable[[], Any]] = {}
    for target in args.targets:
        t0 = time.perf_counter()
        try:
            opts = {"threads": args.threads} if target in THREADED else {}
            ex = gradc.compile(m.train, target=target, **opts)
            status = check(target, ex(**m.inputs), m.ref)   # the warm-up call
        except gradc.GradcError as e:
            rows[target] = Row(status=f"skipped: {why(e)}")
            print(f"[bench] {m.name} {target}: skipped ({why(e)})", file=sys.stderr, flush=True)
            continue
        rows[target] = Row(status=status, setup_s=time.perf_counter() - t0)
        fns[target] = (lambda ex=ex: ex(**m.inputs))
        print(f"[bench] {m.name} {target}: compiled + 1 call in {rows[target].setup_s:.1f} s, "
              f"{status}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rows[TORCH] = Row(status=check(TORCH, m.torch_grads(), m.ref),
                      setup_s=time.perf_counter() - t0)
    fns[TORCH] = m.torch_step
    for key, ts in interleaved(fns, args.repeats, args.rounds).items():
        rows[key].times = ts
        print(f"[bench] {m.name} {key}: median {1e3 * np.median(ts):.2f} ms", file=sys.stderr,
              flush=True)
    return rows


# ---------------------------------------------------------------- the report

def table(models: list[Model], results: dict[str, dict[str, Row]], peers: list[str]
          ) -> list[str]:
    """The Markdown table: one row per model and peer."""
    lines = ["| model | params | GFLOP/step | peer | median ms | min ms | / PyTorch | GFLOP/s "
             "| status |", "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for m in models:
        rows = results[m.name]
        base = rows[TORCH].times
        base_ms = 1e3 * float(np.median(base)) if base else None
        gflop = m.flops / 1e9 if m.flops else None
        for i, peer in enumerate(peers):
            r = rows.get(peer)
            if r is None:
                continue
            head = (f"{m.name} | {m.params / 1e6:.2f}M | "
                    f"{'n/a' if gflop is None else f'{gflop:.3f}'}") if i == 0 else " | | "
            label = "PyTorch eager" if peer == TORCH else f"gradc {peer}"
            if not r.times:
                lines.append(f"| {head} | {label} | - | - | - | - | {r.status} |")
                continue
            med, low = 1e3 * float(np.median(r.times)), 1e3 * min(r.times)
            ratio = f"{med / base_ms:.2f}x" if base_ms else "n/a"
            rate = f"{gflop / med * 1e3:.2f}" if gflop else "n/a"
            flag = " (!)" if r.status.startswith("NO") else ""
            lines.append(f"| {head} | {label}{flag} | {med:.2f} | {low:.2f} | {ratio} | {rate} "
                         f"| {r.status} |")
    return lines


def machine(threads: int) -> list[str]:
    """Facts about the machine and the software."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return [f"- machine: {cpu}, {os.cpu_count()} CPUs; threads {threads} (torch.set_num_threads,"
            f" gradc c/onnx threads=); gradc numpy and reference run as they run",
            f"- Python {platform.python_version()}, numpy {np.__version__}, torch "
            f"{torch.__version__}, onnxruntime {ort.__version__}, gradc {gradc.__version__}"]


def load() -> str:
    """The 1/5/15-minute load averages."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# ---------------------------------------------------------------- main

def model_arguments(ap: argparse.ArgumentParser) -> None:
    """The options that pick and size the models (this module's, bench_train_step's and
    bench_models' command lines)."""
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated subset of: {', '.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    ap.add_argument("--size", type=int, default=64,
                    help="image side for the CNNs (default 64; the MLP is always 3x32x32)")
    ap.add_argument("--width", type=int, default=1,
                    help="channel divisor (default 1: the full models; 8 gives a quick run)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_arguments(ap)
    ap.add_argument("--targets", default="c,numpy,onnx",
                    help=f"gradc targets, comma-separated subset of: {', '.join(TARGETS)}")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per round (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads for PyTorch and gradc's c and onnx targets (default 2)")
    args = ap.parse_args(argv)
    args.models = [s for s in args.models.split(",") if s]
    args.targets = [s for s in args.targets.split(",") if s]
    bad = sorted(set(args.models) - set(MODELS)) + sorted(set(args.targets) - set(TARGETS))
    if bad or min(args.batch, args.size, args.width, args.repeats, args.rounds,
                  args.threads) < 1:
        ap.error(f"unknown {bad}" if bad else "numbers must be >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    """Build, check and time every model, then print the table."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    start, load_before = time.perf_counter(), load()
    models, results = [], {}
    for name in args.models:
        t0 = time.perf_counter()
        m = build(name, args)
        m.flops = count_flops(m)
        print(f"[bench] {name}: exported, imported, differentiated in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        results[name] = run_model(m, args)
        m.inputs, m.ref = {}, {}   # the report needs only names, sizes and results
        models.append(m)
    peers = [*args.targets, TORCH]
    out = ["# gradc training step (forward + backward) on real models, float32", "",
           *machine(args.threads),
           f"- batch {args.batch}, CNN input 3x{args.size}x{args.size} (MLP 3x32x32), width "
           f"divisor {args.width}; export ts_train_loss, gradc.grad(wrt='parameters'), loss "
           f"cotangent 1; dropout p=0",
           f"- timing: compile + 1 checked call, then {args.rounds} interleaved rounds of 1 "
           f"untimed + {args.repeats} timed calls per peer (rotating order); whole run "
           f"{time.perf_counter() - start:.0f} s",
           f"- load average (1/5/15 min): before {load_before}, after {load()}",
           "- / PyTorch = median / PyTorch eager's median (above 1: slower than PyTorch); "
           "GFLOP/s = FLOPs of the PyTorch step (torch.utils.flop_counter) / median",
           "- status: gradients against gradc's reference target (numpy/c bit-exact, onnx "
           f"within {ONNX_REL:g} of the largest gradient; PyTorch for information only)", "",
           *table(models, results, peers)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
