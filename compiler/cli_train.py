"""``gradc train-step`` and ``gradc train``: training steps from the command line (API.md).

``train-step`` writes ``gradc.training_step`` of a model as standard ONNX (or text IR): a graph
that stock onnxruntime runs once per batch, its state inputs holding the initial values as
initializers.

``train`` checks the data against the model before anything is compiled (``train_data``), then
trains with a ``gradc.Trainer``: a progress bar on stderr (tqdm; it hides itself when stderr is
not a terminal), one line per epoch on stdout with the mean loss and, with class labels, the
accuracy of the model in inference mode on the training data; at the end it writes the trained
model (``Trainer.export``) and the loss curve (SVG). Without ``--loss``, a model whose first
output is not a loss trains with cross_entropy when the data file holds ``labels`` and mse when
it holds ``target`` (the first line says which). Exit status: 0, 2 for bad input (nothing
written), 1 when the loss became NaN or infinite (training stops at that step, nothing written),
130 when interrupted (nothing written; a checkpoint written earlier stays whole, since every
file is written through a temporary file and a rename).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import zipfile
from typing import Any

import numpy as np

from gradc.api import compile
from gradc.curves import write_loss_curve
from gradc.errors import GradcError, InputError
from gradc.ir.core import Graph
from gradc.optim import SGD, Adam, AdamW
from gradc.train_data import load_dataset
from gradc.trainer import Trainer
from gradc.training import LOSSES, RNG_INPUT, training_step

EXIT_DIVERGED = 1
EXIT_INTERRUPTED = 130
DEFAULT_LR = {"sgd": 0.01, "adam": 1e-3, "adamw": 1e-3}
DEFAULT_BATCH = 32


class TrainCliError(GradcError):
    """A command-line problem of the training subcommands, reported as one line."""


def optimizer_from(args: argparse.Namespace) -> Any:
    """The ``gradc.optim`` object the flags describe (flags of another optimizer refused)."""
    kind = args.optimizer
    lr = DEFAULT_LR[kind] if args.lr is None else args.lr
    wd = args.weight_decay
    if kind == "sgd":
        return SGD(lr, momentum=args.momentum or 0.0, dampening=args.dampening or 0.0,
                   weight_decay=wd or 0.0, nesterov=args.nesterov)
    for flag in ("momentum", "dampening"):
        if getattr(args, flag) is not None:
            raise TrainCliError(f"--{flag}: only for --optimizer sgd, got --optimizer {kind}")
    if args.nesterov:
        raise TrainCliError(f"--nesterov: only for --optimizer sgd, got --optimizer {kind}")
    betas = tuple(args.betas) if args.betas is not None else (0.9, 0.999)
    cls = Adam if kind == "adam" else AdamW
    return cls(lr=lr, betas=betas, eps=args.eps,
               weight_decay=(0.0 if kind == "adam" else 0.01) if wd is None else wd)


def describe(opt: Any) -> str:
    """``SGD(lr=0.1, momentum=0.9)``: the hyperparameters that differ from the defaults."""
    name = type(opt).__name__
    fields = {"lr": opt.lr}
    if isinstance(opt, SGD):
        fields.update({k: getattr(opt, k) for k in ("momentum", "dampening", "weight_decay",
                                                    "nesterov") if getattr(opt, k)})
    else:
        fields.update({"betas": opt.betas, "eps": opt.eps, "weight_decay": opt.weight_decay})
    return f"{name}(" + ", ".join(f"{k}={v:g}" if isinstance(v, float) and not isinstance(
        v, bool) else f"{k}={v}" for k, v in fields.items()) + ")"


def _check_loss(g: Graph, loss: str | None) -> None:
    """Without --loss the first output must be the loss: say which flag to pass otherwise."""
    if loss is None and g.outputs and g.outputs[0].type.size != 1:
        first = g.outputs[0]
        raise TrainCliError(f"the first output {first.name!r} ({first.type}) is not a loss: "
                            f"pass --loss cross_entropy (class scores on axis 1, with labels) "
                            f"or --loss mse (with a target)")


def _data_names(path: str) -> list[str] | None:
    """The array names an .npz file holds, or None where it is not a readable archive (then
    ``load_dataset`` says what is wrong with it)."""
    try:
        if not os.path.isfile(path) or not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as z:
            return [n[:-len(".npy")] for n in z.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile):
        return None


def _loss_for_data(g: Graph, args: argparse.Namespace) -> str | None:
    """``--loss`` for ``gradc train``: as given; else none when the first output is the loss;
    else cross_entropy when the data file holds ``labels``, mse when it holds ``target``."""
    if args.loss is not None or not g.outputs or g.outputs[0].type.size == 1:
        return args.loss
    names = _data_names(args.data)
    if names is None:  # missing, empty or not an archive: the data check names the problem
        load_dataset(args.data, [(v.name, v.type.dtype.name, v.type.shape) for v in g.inputs
                                 if v.name != RNG_INPUT])
    found = [n for n in ("labels", "target") if n in (names or [])]
    if len(found) != 1:
        _check_loss(g, None)  # raises: pass --loss
    loss = "cross_entropy" if found[0] == "labels" else "mse"
    first = g.outputs[0]
    print(f"loss: {loss} of the first output {first.name!r} and the array {found[0]!r} of "
          f"{args.data} (--loss to choose)")
    return loss


def _listing(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


# -- gradc train-step ------------------------------------------------------------------------

def cmd_train_step(args: argparse.Namespace, load_graph: Any, write_graph: Any) -> int:
    """``gradc train-step``: the training step as ONNX (or text IR)."""
    g = load_graph(args.file, args.parameters) if args.parameters else load_graph(args.file)
    opt = optimizer_from(args)
    _check_loss(g, args.loss)
    step = training_step(g, opt, loss=args.loss, frozen=args.frozen or (), seed=args.seed)
    written = write_graph(args.output, step)
    params = [p.name for p in step.parameters]
    feeds = [v.name for v in step.inputs]
    print(f"wrote {written}: training step {step.name!r} ({describe(opt)}"
          f"{', loss ' + args.loss if args.loss else ''}) with {len(step.nodes)} nodes")
    print(f"  feed: {', '.join(feeds)} (step = 1 for the first update), and the state from "
          f"the previous step")
    print(f"  state: {len(params)} tensors ({_listing(params)}); their initial values are the "
          f"initializers")
    print("  outputs: loss, then <name>.next for each state tensor: feed them back as <name>")
    return 0


# -- gradc train -----------------------------------------------------------------------------

def _data_specs(g: Graph, step: Graph) -> tuple[list, tuple | None, int | None]:
    """The arrays the data file must hold: the forward inputs (without the dropout state), and
    labels/target with the class count that labels must lie below."""
    forward = {v.name for v in g.inputs if v.name != RNG_INPUT}
    inputs = [(v.name, v.type.dtype.name, v.type.shape) for v in step.inputs
              if v.name in forward]
    extra = [v for v in step.inputs if v.name not in forward and v.name != "step"]
    label = None
    classes = None
    if extra:
        v = extra[0]
        label = (v.name, v.type.dtype.name, v.type.shape)
        if v.name == "labels":
            c = g.outputs[0].type.shape[1]
            classes = c if isinstance(c, int) else None
    return inputs, label, classes


def _batch_size(args: argparse.Namespace, inputs: list) -> tuple[int, bool]:
    """The batch size, and whether the model's batch is static (then every batch is full)."""
    dims = {shape[0] for _, _, shape in inputs if shape}
    static = [d for d in dims if isinstance(d, int)]
    if static:
        b = static[0]
        if args.batch_size is not None and args.batch_size != b:
            raise TrainCliError(f"--batch-size {args.batch_size}: the model's inputs have a "
                                f"fixed batch of {b} (export it with a symbolic batch, e.g. "
                                f"torch.export's dynamic_shapes or torch.onnx's dynamic_axes, "
                                f"to train with other sizes)")
        return b, True
    return (args.batch_size or DEFAULT_BATCH), False


def _check_output(path: str, what: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise TrainCliError(f"{what} {path}: folder {folder} does not exist")
    if os.path.isdir(path):
        raise TrainCliError(f"{what} {path}: is a directory")


def _progress(total: int, initial: int, desc: str) -> Any:
    """A tqdm bar on stderr that hides itself when stderr is not a terminal."""
    from tqdm import tqdm  # lazy: only `gradc train` draws a bar

    return tqdm(total=total, initial=initial, desc=desc, unit="step", file=sys.stderr,
                disable=not sys.stderr.isatty(), leave=False, dynamic_ncols=True)


class _Evaluator:
    """Accuracy of the model in inference mode (running statistics, no dropout) on the
    training data, compiled once: the trained values are passed by name at each call."""

    def __init__(self, trainer: Any, target: str, options: dict[str, Any]) -> None:
        graph = trainer.inference_graph()
        self.exe = compile(graph, target, **options)
        self.names = [p.name for p in graph.parameters]
        self.output = graph.outputs[0].name

    def accuracy(self, trainer: Any, batches: Any, label: str) -> float:
        values = trainer.parameters
        params = {n: values[n] for n in self.names if n in values}
        right = total = 0
        for batch in batches.epoch_batches(0):
            labels = batch.pop(label)
            out = self.exe(**batch, **params)[self.output]
            right += int(np.sum(out.argmax(axis=1) == labels))
            total += labels.size
        return right / max(total, 1)


def cmd_train(args: argparse.Namespace, load_graph: Any) -> int:
    """``gradc train``: see the module docstring. Ctrl-C at any point (loading, compiling,
    training, writing) ends with one line and exit status 130; each file is written whole or
    not at all, and the line names the files already written."""
    done: dict[str, Any] = {"steps": None, "checkpoint": None, "wrote": []}
    try:
        return _train(args, load_graph, done)
    except KeyboardInterrupt:
        where = "before training started" if done["steps"] is None else \
            f"at step {done['steps']}"
        wrote = ", ".join(done["wrote"])
        print(f"\ngradc: interrupted {where}: "
              + (f"wrote only {wrote}" if wrote else "nothing written")
              + (f"; the last checkpoint {done['checkpoint']} is intact"
                 if done["checkpoint"] else ""), file=sys.stderr)
        return EXIT_INTERRUPTED


def _train(args: argparse.Namespace, load_graph: Any, done: dict[str, Any]) -> int:
    """The body of ``cmd_train``; ``done`` records progress for the Ctrl-C message."""
    _check_output(args.output, "-o")
    curve = args.curve if args.curve is not None else os.path.splitext(args.output)[0] + \
        ".loss.svg"
    if curve:
        _check_output(curve, "--curve")
    if args.checkpoint:
        _check_output(args.checkpoint, "--checkpoint")
    if args.epochs < 1:
        raise TrainCliError(f"--epochs: expected at least 1, got {args.epochs}")
    g = load_graph(args.file)
    opt = optimizer_from(args)
    args.loss = _loss_for_data(g, args)
    _check_loss(g, args.loss)
    step = training_step(g, opt, loss=args.loss, frozen=args.frozen or (), seed=args.seed)
    inputs, label, classes = _data_specs(g, step)
    batch, static = _batch_size(args, inputs)
    data = load_dataset(args.data, inputs, label=label, classes=classes,
                        ignore_index=args.ignore_index)
    if static and data.size < batch:
        raise InputError(f"{args.data}: {data.size} examples, fewer than the model's fixed "
                         f"batch of {batch}")
    batches = data.batches(batch, shuffle=True, seed=args.seed, drop_last=static)
    for note in data.notes:
        print(f"note: {note}", file=sys.stderr)
    options: dict[str, Any] = {}
    if args.threads is not None and args.target in ("c", "onnx"):
        options["threads"] = args.threads
    t0 = time.perf_counter()
    trainer = Trainer(g, opt, loss=args.loss, frozen=args.frozen or (), target=args.target,
                      seed=args.seed, **options)
    evaluator = _Evaluator(trainer, args.target, options) if label and label[0] == "labels" \
        else None
    if args.resume:
        trainer.load(args.resume)
    per_epoch = len(batches)
    used = per_epoch * batch if static else data.size
    dropped = f", the last {data.size - used} dropped (fixed batch)" if used < data.size else ""
    print(f"training {g.name!r} on {args.data}: {data.size} examples{dropped}, batch {batch}, "
          f"{per_epoch} steps per epoch; {describe(opt)}, target {args.target} (compiled in "
          f"{time.perf_counter() - t0:.1f} s)")
    losses: list[float] = []
    start_epoch, skip = divmod(trainer.steps, per_epoch)
    done["steps"] = trainer.steps
    for epoch in range(start_epoch, args.epochs):
        epoch_losses: list[float] = []
        t_epoch = time.perf_counter()
        seen = 0
        desc = f"epoch {epoch + 1}/{args.epochs}"
        with _progress(per_epoch, skip, desc) as bar:
            for i, b in enumerate(batches.epoch_batches(epoch)):
                if i < skip:
                    continue
                loss = trainer.step(**b)
                done["steps"] = trainer.steps
                seen += len(next(iter(b.values())))
                if not math.isfinite(loss):
                    bar.close()
                    saved = done["checkpoint"]
                    print(f"gradc: training stopped: the loss is {loss} at step "
                          f"{trainer.steps} (epoch {epoch + 1}); nothing written"
                          + (f" (the last checkpoint {saved} is intact)" if saved else ""),
                          file=sys.stderr)
                    return EXIT_DIVERGED
                losses.append(loss)
                epoch_losses.append(loss)
                rate = seen / max(time.perf_counter() - t_epoch, 1e-9)
                bar.set_postfix(loss=f"{loss:.4f}", ex_s=f"{rate:.0f}", refresh=False)
                bar.update(1)
        skip = 0
        took = time.perf_counter() - t_epoch
        line = (f"epoch {epoch + 1}/{args.epochs}: mean loss "
                f"{float(np.mean(epoch_losses)) if epoch_losses else float('nan'):.4f}")
        if evaluator is not None:
            acc = evaluator.accuracy(trainer, data.batches(batch, shuffle=False,
                                                           drop_last=static), "labels")
            line += f", accuracy {100 * acc:.1f}%"
        print(f"{line} ({seen} examples, {took:.1f} s, {seen / max(took, 1e-9):.0f} "
              f"examples/s)", flush=True)
        if args.checkpoint:
            trainer.save(args.checkpoint)
            done["checkpoint"] = args.checkpoint
    trainer.export(args.output)
    done["wrote"].append(args.output)
    print(f"wrote {args.output}: the trained model for inference ({trainer.steps} steps)")
    if curve:
        write_loss_curve(curve, {"loss": losses},
                         title=f"gradc train {os.path.basename(args.file)}")
        done["wrote"].append(curve)
        print(f"wrote {curve}: the loss of each step")
    if args.checkpoint:
        print(f"wrote {args.checkpoint}: parameters, optimizer state and step (--resume)")
    return 0


# -- arguments -------------------------------------------------------------------------------

def _optimizer_flags(p: argparse.ArgumentParser, seed: Any) -> None:
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam",
                   help="torch.optim's algorithm of that name (default adam)")
    p.add_argument("--lr", type=float, help="learning rate (default 0.01 for sgd, 1e-3 "
                                            "for adam and adamw)")
    p.add_argument("--momentum", type=float, help="sgd only (default 0)")
    p.add_argument("--dampening", type=float, help="sgd only (default 0)")
    p.add_argument("--nesterov", action="store_true", help="sgd only: Nesterov momentum")
    p.add_argument("--weight-decay", type=float, help="default 0 (adamw: 0.01)")
    p.add_argument("--betas", type=float, nargs=2, metavar=("B1", "B2"),
                   help="adam and adamw (default 0.9 0.999)")
    p.add_argument("--eps", type=float, default=1e-8, help="adam and adamw (default 1e-8)")
    p.add_argument("--loss", choices=list(LOSSES),
                   help="applied to the first output: cross_entropy adds the input labels "
                        "(int64 class indices), mse the input target; without it the first "
                        "output is the loss (train: unless it has more than one element; "
                        "then cross_entropy if the data file holds labels, mse if target)")
    p.add_argument("--frozen", action="append", metavar="NAME",
                   help="a parameter to keep fixed (repeatable)")
    p.add_argument("--seed", type=seed, default=0,
                   help="seeds the dropout state (and the data order for train)")


def add_parsers(sub: Any, seed: Any, load_graph: Any, write_graph: Any) -> None:
    """Register ``train-step`` and ``train`` on the ``gradc`` subparsers."""
    p = sub.add_parser("train-step", help="write a model's training step (forward, loss, "
                                          "gradients, optimizer) as ONNX for onnxruntime")
    p.add_argument("file", help="a .onnx or .pt2 file, a text-IR file, or example:NAME")
    p.add_argument("--parameters", metavar="FILE.npz",
                   help="values of a text-IR file's parameters")
    p.add_argument("-o", "--output", required=True, help="output file (.onnx, or text IR)")
    _optimizer_flags(p, seed)
    p.set_defaults(fn=lambda a: cmd_train_step(a, load_graph, write_graph))

    p = sub.add_parser("train", help="train a model on an .npz data file and write the "
                                     "trained model",
                       epilog="exit status: 0 trained and written; 1 the loss became NaN or "
                              "infinite (nothing written); 2 bad input, flags or data (nothing "
                              "written); 130 interrupted (Ctrl-C; only files already written "
                              "whole remain)")
    p.add_argument("file", help="a .pt2 file (torch.export.save of a module in train()) or "
                                "a .onnx file exported in training mode")
    p.add_argument("--data", required=True, metavar="DATA.npz",
                   help="one array per model input and one for labels/target, examples on "
                        "the first axis")
    p.add_argument("-o", "--output", required=True, help="the trained model (.onnx)")
    _optimizer_flags(p, seed)
    p.add_argument("--epochs", type=int, default=1, help="passes over the data (default 1)")
    p.add_argument("--batch-size", type=int,
                   help=f"examples per step (default: the model's fixed batch, else "
                        f"{DEFAULT_BATCH})")
    p.add_argument("-t", "--target", default="c", choices=["c", "numpy", "onnx", "reference"],
                   help="where the step runs (default c)")
    p.add_argument("--threads", type=int, help="threads of the c and onnx targets")
    p.add_argument("--curve", metavar="FILE.svg",
                   help="the loss curve (default: OUTPUT without .onnx, plus .loss.svg; '' "
                        "for none)")
    p.add_argument("--checkpoint", metavar="FILE.npz",
                   help="save the state here after every epoch (Trainer.save)")
    p.add_argument("--resume", metavar="FILE.npz", help="start from a saved state")
    p.add_argument("--ignore-index", type=int, metavar="LABEL",
                   help="a label value that marks examples (or pixels) the loss leaves out, "
                        "as PyTorch's ignore_index (e.g. -100); other labels outside the class "
                        "range are refused. gradc's cross_entropy counts any label outside "
                        "[0, classes) nowhere (SPEC-training §18), so the step needs no flag")
    p.set_defaults(fn=lambda a: cmd_train(a, load_graph))


__all__ = ["add_parsers", "cmd_train", "cmd_train_step", "optimizer_from"]
