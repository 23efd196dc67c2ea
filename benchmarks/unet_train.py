"""The UNet trains on CPU: gradc on every target beside PyTorch, same weights and batches.

    python benchmarks/unet_train.py [--steps 20] [--width 1] [--batch 4] [--size 32]
        [--optimizer adam|sgd] [--lr 0.03] [--targets c,numpy,onnx,reference]
        [--out benchmarks/results]

The model is tests/real_models.py's UNet (two levels of conv-BN-ReLU blocks, max pooling down,
nearest and bilinear x2 up, concatenated skips, 4 classes per pixel); ``--width`` divides its
channel count (1 is the full model, 16 channels at the top level). It is exported by the
TorchScript exporter in training mode (form ``ts_train``: batch normalization with
``training_mode=1``), imported with ``gradc.from_onnx`` and trained by ``gradc.Trainer(g,
optimizer, loss="cross_entropy", target=T)``: cross-entropy over the classes on axis 1, with
labels of shape N x H x W (class indices per pixel).

The task is synthetic but learnable, fixed by ``--seed``: every step draws a fresh batch
``x ~ N(0, 1)`` of shape N x 3 x H x W, and each pixel's label is its channel mean quantized at
-0.4, 0 and 0.4 (four classes of about equal size). The rule holds for every batch, so the loss
goes down because the network learns it, not because it memorizes a batch.

PyTorch trains a copy of the same module (its ``state_dict`` from before the export) with
``F.cross_entropy`` and the ``torch.optim`` class of the same name and hyperparameters, on the
same batches. In training mode a loss depends only on the batch statistics of batch
normalization, so PyTorch's unbiased running variance (gradc keeps ONNX's biased one,
SPEC-training.md §12.5) does not enter the losses: they agree to float32 drift. The output is a
Markdown table of the loss of every step on every target, the largest difference of each
target's losses from PyTorch's, whether c, numpy and reference agree bit for bit, compile and
step times, and an SVG of the curves (``<out>/unet_loss.svg``); the table is also written to
``<out>/unet_train.md``. ``--float64`` runs the model and data in float64 with hyperparameters
exact in float32 (``HYPER``), to ``<out>/unet_train_loss_float64.svg`` and
``<out>/unet_train_float64.md``: it shows that the float32 runs' drift from PyTorch is rounding.

tests/test_train_real_models.py imports ``build``, ``task_batches``, ``run_torch`` and
``run_gradc`` and checks a few steps of a smaller UNet on every target.
"""

from __future__ import annotations

import argparse
import copy
import logging
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import gradc
from gradc.curves import write_loss_curve

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import real_models as rm  # noqa: E402  (tests/ is not a package)

logging.getLogger("torch.onnx").setLevel(logging.ERROR)

TARGETS = ("c", "numpy", "onnx", "reference")
BITEXACT = ("c", "numpy", "reference")
THRESHOLDS = (-0.4, 0.0, 0.4)  # channel-mean quantization: 4 classes, about equal in size
CLASSES = len(THRESHOLDS) + 1

Batch = tuple[np.ndarray, np.ndarray]


@dataclass
class UNetCase:
    """The PyTorch UNet with its weights before the export, and gradc's import of it."""

    model: nn.Module
    graph: Any
    shape: tuple[int, ...]


def build(width: int = 1, batch: int = 4, size: int = 32, seed: int = 0,
          dtype: str = "float32") -> UNetCase:
    """tests/real_models.py's UNet (``width`` divides its channels), exported in training mode
    with a static batch of ``batch`` x 3 x ``size`` x ``size`` and imported by gradc.

    The exporter traces the model in training mode, which updates its batch-norm running
    statistics; the state from before the export is restored, so PyTorch starts where gradc's
    initializers start for the weights (losses in training mode do not read the running
    statistics). In float64 every batch norm's epsilon is 2**-17, exact in float32 (ONNX
    stores it as a float32 attribute; PyTorch's double model would keep 1e-5 itself)."""
    model, shape = rm.make("unet", width=width, seed=seed, size=size)
    if dtype == "float64":
        model = model.double()
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eps = 2.0 ** -17
    before = copy.deepcopy(model.state_dict())
    x = torch.zeros(batch, *shape, dtype=getattr(torch, dtype))
    labels = torch.zeros(batch, size, size, dtype=torch.int64)
    blob = rm.export(model, "ts_train", x, labels)
    model.load_state_dict(before)
    return UNetCase(model, gradc.from_onnx(blob), shape)


def task_batches(steps: int, batch: int, size: int, seed: int = 5,
                 dtype: str = "float32") -> list[Batch]:
    """``steps`` fresh batches (x N x 3 x H x W of ``dtype``, labels int64 N x H x W): each
    pixel's label is its channel mean quantized at THRESHOLDS."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        x = rng.standard_normal((batch, 3, size, size)).astype(dtype)
        labels = np.digitize(x.mean(axis=1), THRESHOLDS).astype(np.int64)
        out.append((x, labels))
    return out


# Optimizer hyperparameters. ``exact``: values exact in float32 (for --float64): gradc rounds
# float hyperparameters to float32 when it builds a node (SPEC-training.md §7 "Float scalars"),
# torch.optim keeps doubles; 0.9 and 0.999 differ by about 3e-8 between the two, which would
# hide everything else in a float64 comparison.
HYPER = {False: {"adam": dict(betas=(0.9, 0.999), eps=1e-8), "sgd": dict(momentum=0.9)},
         True: {"adam": dict(betas=(0.875, 0.9921875), eps=2.0 ** -24),
                "sgd": dict(momentum=0.875)}}


def gradc_optimizer(kind: str, lr: float, exact: bool = False) -> Any:
    """gradc's optimizer of that kind: Adam, or SGD with momentum (HYPER)."""
    if kind == "adam":
        return gradc.optim.Adam(lr, **HYPER[exact]["adam"])  # type: ignore[arg-type]
    if kind == "sgd":
        return gradc.optim.SGD(lr, **HYPER[exact]["sgd"])  # type: ignore[arg-type]
    raise ValueError(f"optimizer {kind!r}: expected adam or sgd")


def torch_optimizer(kind: str, params: Any, lr: float, exact: bool = False
                    ) -> torch.optim.Optimizer:
    """torch.optim's class of the same name and hyperparameters as ``gradc_optimizer``."""
    if kind == "adam":
        return torch.optim.Adam(params, lr, **HYPER[exact]["adam"])  # type: ignore[arg-type]
    if kind == "sgd":
        return torch.optim.SGD(params, lr, **HYPER[exact]["sgd"])  # type: ignore[arg-type]
    raise ValueError(f"optimizer {kind!r}: expected adam or sgd")


def run_torch(case: UNetCase, batches: Sequence[Batch], kind: str, lr: float,
              exact: bool = False) -> list[float]:
    """PyTorch's losses, training a copy of the case's model (the case stays untouched)."""
    model = copy.deepcopy(case.model).train()
    opt = torch_optimizer(kind, model.parameters(), lr, exact)
    losses = []
    for x, labels in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses


@dataclass
class GradcRun:
    """One target's losses, its trainer and its times (seconds)."""

    losses: list[float]
    trainer: Any
    compile_s: float
    steps_s: float


def run_gradc(case: UNetCase, batches: Sequence[Batch], kind: str, lr: float,
              target: str, exact: bool = False) -> GradcRun:
    """gradc.Trainer's losses on ``target`` for the same batches."""
    t0 = time.perf_counter()
    tr = gradc.Trainer(case.graph, gradc_optimizer(kind, lr, exact), loss="cross_entropy",
                       target=target)
    t1 = time.perf_counter()
    losses = [tr.step(x=x, labels=labels) for x, labels in batches]
    return GradcRun(losses, tr, t1 - t0, time.perf_counter() - t1)


def _table(torch_losses: list[float], runs: dict[str, GradcRun]) -> list[str]:
    names = list(runs)
    lines = ["| step | PyTorch | " + " | ".join(f"gradc {t}" for t in names) + " |",
             "|---:|---:|" + "---:|" * len(names)]
    for i, want in enumerate(torch_losses):
        lines.append(f"| {i + 1} | {want:.6f} | "
                     + " | ".join(f"{runs[t].losses[i]:.6f}" for t in names) + " |")
    diffs = [max(abs(a - b) for a, b in zip(runs[t].losses, torch_losses)) for t in names]
    rel = [max(abs(a - b) / abs(b) for a, b in zip(runs[t].losses, torch_losses))
           for t in names]
    lines.append("| max abs diff to PyTorch | | " + " | ".join(f"{d:.2e}" for d in diffs) + " |")
    lines.append("| max rel diff to PyTorch | | " + " | ".join(f"{d:.2e}" for d in rel) + " |")
    lines.append("| compile (s) | | " + " | ".join(f"{runs[t].compile_s:.2f}" for t in names)
                 + " |")
    lines.append("| step (ms, mean) | | "
                 + " | ".join(f"{1e3 * runs[t].steps_s / len(torch_losses):.1f}" for t in names)
                 + " |")
    return lines


def bit_exact(runs: dict[str, GradcRun]) -> bool | None:
    """Whether the c, numpy and reference runs present agree bit for bit (losses and every
    final state array); None with fewer than two of them."""
    exact = [runs[t] for t in BITEXACT if t in runs]
    if len(exact) < 2:
        return None
    first = exact[0]
    state = first.trainer.state_dict()
    for other in exact[1:]:
        if other.losses != first.losses:
            return False
        s = other.trainer.state_dict()
        if any(not np.array_equal(s[k], state[k]) for k in state):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=1,
                   help="divides the UNet's channels (1: the full model, 16 channels on top)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--size", type=int, default=32, help="image height and width")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--lr", type=float, default=0.03125, help="(2**-5: exact in float32)")
    p.add_argument("--seed", type=int, default=0, help="the weights")
    p.add_argument("--data-seed", type=int, default=5, help="the batches")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--float64", action="store_true",
                   help="the model and data in float64, hyperparameters exact in float32 "
                        "(HYPER): shows whether float32 rounding explains the drift")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    dtype = "float64" if args.float64 else "float32"
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in TARGETS:
            p.error(f"--targets: unknown target {t!r} (expected {', '.join(TARGETS)})")
    torch.set_num_threads(1)

    case = build(args.width, args.batch, args.size, args.seed, dtype)
    batches = task_batches(args.steps, args.batch, args.size, args.data_seed, dtype)
    want = run_torch(case, batches, args.optimizer, args.lr, args.float64)
    runs = {t: run_gradc(case, batches, args.optimizer, args.lr, t, args.float64)
            for t in targets}

    params = sum(int(np.prod(q.type.shape)) for q in case.graph.parameters)
    head = (f"UNet width {args.width} ({params} parameter values), batch {args.batch} x 3 x "
            f"{args.size} x {args.size}, labels {args.batch} x {args.size} x {args.size} "
            f"({CLASSES} classes), {dtype}, {args.optimizer} lr {args.lr} "
            f"{HYPER[args.float64][args.optimizer]}, {args.steps} steps; "
            f"torch {torch.__version__} (1 thread), {platform.machine()}")
    exact = bit_exact(runs)
    lines = [head, "", *_table(want, runs), ""]
    if exact is not None:
        note = ("" if not args.float64 or exact else
                " (not promised in float64: C's libm exp and log may differ from NumPy's by "
                "ulps, the transcendental numerics class of docs/operators.md)")
        lines.append(f"c, numpy and reference bit for bit (losses and final state): "
                     f"{'yes' if exact else 'no'}{note}")
    lines.append(f"loss: first {want[0]:.4f}, last {want[-1]:.4f} (PyTorch)")
    text = "\n".join(lines)
    print(text)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    series = {"PyTorch": want, **{f"gradc {t}": r.losses for t, r in runs.items()}}
    stem = "unet_train_loss_float64" if args.float64 else "unet_loss"
    write_loss_curve(out / f"{stem}.svg", series,
                     title=f"UNet ({args.optimizer}, lr {args.lr}, {dtype}): gradc targets and "
                           f"PyTorch")
    (out / ("unet_train_float64.md" if args.float64 else "unet_train.md")).write_text(
        "# The UNet trains on CPU\n\n`"
        + " ".join(["python benchmarks/unet_train.py",
                    *(argv if argv is not None else sys.argv[1:])]) + "`\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
