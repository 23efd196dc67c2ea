"""``gradc train-step`` and ``gradc train``: training steps from the command line.

``train-step`` writes ``gradc.training_step`` of a model as standard ONNX (or text IR): a graph
that stock onnxruntime runs once per batch, its state inputs holding the initial values as
initializers.

``train`` checks the data against the model before anything is compiled (``train_data``, the
check ``Trainer.step`` makes on each batch too), then trains with a ``gradc.Trainer``: a
progress bar on stderr (tqdm; it hides itself when stderr is not a terminal), one line per epoch
on stdout with the training figures, labelled ``train``: the mean loss of the epoch's steps and,
with class labels, the accuracy of the model in inference mode on the training data; with
``--val-data``, the loss and accuracy on that held-out data, labelled ``val``
(``train_eval``); at the end it writes the trained model (``Trainer.export``) and the loss
curve (SVG), whose steps are numbered from the first step of the run (after a ``--resume``, the
step after the checkpoint's). Without ``--loss``, a model whose first
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

from gradc.backends.c.runtime import preload_openmp
from gradc.cli_args import INT64_MAX, INT64_MIN, integer, real
from gradc.curves import write_loss_curve
from gradc.errors import GradcError, InputError
from gradc.files import check_output_file, wrote
from gradc.ir.core import Graph
from gradc.optim import SGD, Adam, AdamW, WarmupCosine, WarmupLinear
from gradc.train_data import Batches, DataSpec, Dataset, data_spec, load_data, load_dataset
from gradc.train_eval import Evaluator, Measure
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
    schedule = schedule_from(args)
    if kind == "sgd":
        return SGD(lr, momentum=args.momentum or 0.0, dampening=args.dampening or 0.0,
                   weight_decay=wd or 0.0, nesterov=args.nesterov, schedule=schedule)
    for flag in ("momentum", "dampening"):
        if getattr(args, flag) is not None:
            raise TrainCliError(f"--{flag}: only for --optimizer sgd, got --optimizer {kind}")
    if args.nesterov:
        raise TrainCliError(f"--nesterov: only for --optimizer sgd, got --optimizer {kind}")
    betas = tuple(args.betas) if args.betas is not None else (0.9, 0.999)
    cls = Adam if kind == "adam" else AdamW
    return cls(lr=lr, betas=betas, eps=args.eps,
               weight_decay=(0.0 if kind == "adam" else 0.01) if wd is None else wd,
               schedule=schedule)


def schedule_from(args: argparse.Namespace) -> Any:
    """The learning-rate schedule of ``--schedule``, ``--warmup-steps`` and ``--total-steps``
    (a schedule needs ``--total-steps``; the step counts need a schedule)."""
    if args.schedule is None:
        for flag in ("warmup_steps", "total_steps"):
            if getattr(args, flag) is not None:
                raise TrainCliError(f"--{flag.replace('_', '-')}: only with --schedule "
                                    f"warmup-cosine or warmup-linear")
        return None
    if args.total_steps is None:
        raise TrainCliError(f"--schedule {args.schedule}: needs --total-steps (the step at "
                            f"which the learning rate reaches 0)")
    cls = WarmupCosine if args.schedule == "warmup-cosine" else WarmupLinear
    return cls(args.warmup_steps or 0, args.total_steps)


def step_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``training_step`` and ``Trainer`` that the flags give."""
    return {"loss": args.loss, "parameters": args.train or "all", "frozen": args.frozen or (),
            "seed": args.seed, "class_axis": 1 if args.class_axis is None else args.class_axis,
            "ignore_index": args.ignore_index, "max_grad_norm": args.max_grad_norm}


def describe(opt: Any) -> str:
    """``SGD(lr=0.1, momentum=0.9)``: the hyperparameters that differ from the defaults."""
    name = type(opt).__name__
    fields = {"lr": opt.lr}
    if isinstance(opt, SGD):
        fields.update({k: getattr(opt, k) for k in ("momentum", "dampening", "weight_decay",
                                                    "nesterov") if getattr(opt, k)})
    else:
        fields.update({"betas": opt.betas, "eps": opt.eps, "weight_decay": opt.weight_decay})
    if opt.schedule is not None:
        s = opt.schedule
        fields["schedule"] = f"{type(s).__name__}({s.warmup_steps}, {s.total_steps})"
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
    opt = optimizer_from(args)
    g = load_graph(args.file, args.parameters) if args.parameters else load_graph(args.file)
    _check_loss(g, args.loss)
    step = training_step(g, opt, **step_options(args))
    written = write_graph(args.output, step)
    params = [p.name for p in step.parameters]
    feeds = [v.name for v in step.inputs]
    wrote(written, f"training step {step.name!r} ({describe(opt)}"
          f"{', loss ' + args.loss if args.loss else ''}) with {len(step.nodes)} nodes")
    print(f"  feed: {', '.join(feeds)} (step = 1 for the first update), and the state from "
          f"the previous step")
    print(f"  state: {len(params)} tensors ({_listing(params)}); their initial values are the "
          f"initializers")
    print("  outputs: loss, then <name>.next for each state tensor: feed them back as <name>")
    return 0


# -- gradc train -----------------------------------------------------------------------------

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
    return (DEFAULT_BATCH if args.batch_size is None else args.batch_size), False


def _progress(total: int, initial: int, desc: str) -> Any:
    """A tqdm bar on stderr that hides itself when stderr is not a terminal."""
    from tqdm import tqdm  # lazy: only `gradc train` draws a bar

    return tqdm(total=total, initial=initial, desc=desc, unit="step", file=sys.stderr,
                disable=not sys.stderr.isatty(), leave=False, dynamic_ncols=True)


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
    curve = args.curve if args.curve is not None else os.path.splitext(args.output)[0] + \
        ".loss.svg"
    if curve:
        check_output_file(curve, "--curve")
    opt = optimizer_from(args)
    compile_options = _compile_options(args)
    if args.target == "c":
        # OpenMP reads its settings when it is loaded: before a .pt2 file imports PyTorch,
        # which brings the same runtime with its own (gradc.backends.c.runtime).
        preload_openmp(args.spin_count)
    g = load_graph(args.file)
    args.loss = _loss_for_data(g, args)
    _check_loss(g, args.loss)
    options = step_options(args)
    spec = data_spec(g, training_step(g, opt, **options), options["class_axis"],
                     args.ignore_index)
    batch, static = _batch_size(args, list(spec.inputs))
    data = _load(args.data, spec, batch, static)
    val = _load(args.val_data, spec, batch, static) if args.val_data else None
    batches = data.batches(batch, shuffle=True, seed=args.seed, drop_last=static)
    notes = list(data.notes + (val.notes if val else ()))
    if val is not None and static and val.size % batch:
        notes.append(f"{args.val_data}: the last {val.size % batch} examples are not measured "
                     f"(the model's fixed batch is {batch})")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    t0 = time.perf_counter()
    trainer = Trainer(g, opt, target=args.target, **options, **compile_options)
    evaluator = Evaluator(trainer, args.loss, spec, options["class_axis"], args.target,
                          compile_options) if val or spec.classes is not None else None
    _compile_sizes(trainer, evaluator, data, val, batch, static)
    per_epoch = len(batches)
    used = per_epoch * batch if static else data.size
    dropped = f", the last {data.size - used} dropped (fixed batch)" if used < data.size else ""
    print(f"training {g.name!r} on {args.data}: {data.size} examples{dropped}, batch {batch}, "
          f"{per_epoch} steps per epoch; {describe(opt)}, target {args.target} (compiled in "
          f"{time.perf_counter() - t0:.1f} s)")
    if args.resume:
        trainer.load(args.resume)
    start_epoch, skip = divmod(trainer.steps, per_epoch)
    if args.resume:
        print(f"resumed from {args.resume}: {trainer.steps} steps done; continuing at step "
              f"{trainer.steps + 1} (epoch {start_epoch + 1}, batch {skip + 1} of "
              f"{per_epoch})")
    first_step = trainer.steps + 1  # the loss curve numbers the steps of this run from here
    losses: list[float] = []
    done["steps"] = trainer.steps
    for epoch in range(start_epoch, args.epochs):
        t_epoch = time.perf_counter()
        ran = _epoch(trainer, batches, epoch, skip, args.epochs, done)
        if ran is None:
            return EXIT_DIVERGED
        epoch_losses, seen = ran
        skip = 0
        losses.extend(epoch_losses)
        took = time.perf_counter() - t_epoch
        figures = _figures(epoch_losses, evaluator, trainer,
                           data.batches(batch, shuffle=False, drop_last=static),
                           val.batches(batch, shuffle=False, drop_last=static) if val else None)
        print(f"epoch {epoch + 1}/{args.epochs}: {figures} ({seen} examples, {took:.1f} s, "
              f"{seen / max(took, 1e-9):.0f} examples/s)", flush=True)
        if args.checkpoint:
            trainer.save(args.checkpoint)
            done["checkpoint"] = args.checkpoint
    trainer.export(args.output)
    done["wrote"].append(args.output)
    wrote(args.output, f"the trained model for inference ({trainer.steps} steps)")
    if curve:
        resumed = f" (resumed at step {first_step})" if first_step > 1 else ""
        write_loss_curve(curve, {"loss": losses}, first_x=first_step,
                         title=f"gradc train {os.path.basename(args.file)}{resumed}")
        done["wrote"].append(curve)
        wrote(curve, f"the loss of steps {first_step} to {first_step + len(losses) - 1}"
              if losses else "no step ran (the checkpoint had done every epoch)")
    if args.checkpoint:
        wrote(args.checkpoint, "parameters, optimizer state and step (--resume)")
    return 0


def _compile_options(args: argparse.Namespace) -> dict[str, Any]:
    """The target options of ``--threads`` and ``--spin-count``."""
    options: dict[str, Any] = {}
    if args.threads is not None and args.target in ("c", "onnx"):
        options["threads"] = args.threads
    if args.spin_count is not None:
        if args.target != "c":
            raise TrainCliError(f"--spin-count: only for -t c, got -t {args.target}")
        options["spin_count"] = args.spin_count
    return options


def _compile_sizes(trainer: Trainer, evaluator: Evaluator | None, data: Dataset,
                   val: Dataset | None, batch: int, static: bool) -> None:
    """Compile the step and the measures for every batch size of the run before it starts (a
    symbolic batch is bound per size: ``Trainer``): the batch, and the smaller last batch of
    data that does not divide, which trains too (a fixed batch drops it instead)."""
    for d in (data, val):
        if d is None:
            continue
        sizes = {min(batch, d.size)} | ({d.size % batch} if not static and d.size % batch
                                         else set())
        for k in sorted(sizes, reverse=True):
            sample = {name: a[:k] for name, a in d.arrays.items()}
            if d is data:
                trainer.executable_for(**sample)
            if evaluator is not None:
                evaluator.compiled.select(sample)


def _load(path: str, spec: DataSpec, batch: int, static: bool) -> Dataset:
    """A data file checked against the model (``train_data``), with enough examples for a
    fixed batch."""
    data = load_data(path, spec)
    if static and data.size < batch:
        raise InputError(f"{path}: {data.size} examples, fewer than the model's fixed batch "
                         f"of {batch}")
    return data


def _epoch(trainer: Trainer, batches: Batches, epoch: int, skip: int, epochs: int,
           done: dict[str, Any]) -> tuple[list[float], int] | None:
    """The steps of one epoch (the first ``skip`` batches left out: a resumed run): their
    losses and the examples seen, or None when a loss was not finite (said on stderr)."""
    losses: list[float] = []
    t_epoch = time.perf_counter()
    seen = 0
    with _progress(len(batches), skip, f"epoch {epoch + 1}/{epochs}") as bar:
        for i, b in enumerate(batches.epoch_batches(epoch)):
            if i < skip:
                continue
            loss = trainer.step(**b)
            done["steps"] = trainer.steps
            seen += len(next(iter(b.values())))
            if not math.isfinite(loss):
                bar.close()
                saved = done["checkpoint"]
                print(f"gradc: training stopped: the loss is {loss} at step {trainer.steps} "
                      f"(epoch {epoch + 1}); nothing written"
                      + (f" (the last checkpoint {saved} is intact)" if saved else ""),
                      file=sys.stderr)
                return None
            losses.append(loss)
            rate = seen / max(time.perf_counter() - t_epoch, 1e-9)
            bar.set_postfix(loss=f"{loss:.4f}", ex_s=f"{rate:.0f}", refresh=False)
            bar.update(1)
    return losses, seen


def _figures(losses: list[float], evaluator: Evaluator | None, trainer: Trainer,
             train: Batches, val: Batches | None) -> str:
    """``train loss L, train accuracy A%, val loss L, val accuracy A%``: the figures measured
    on the training data say so (the loss is the mean of the epoch's steps, the accuracy the
    model's in inference mode after them); accuracy only with class labels."""
    mean = float(np.mean(losses)) if losses else float("nan")
    parts = [f"train loss {mean:.4f}"]
    if evaluator is None:
        return parts[0]
    what = "token accuracy" if evaluator.per_token else "accuracy"
    if evaluator.kind == "cross_entropy":
        parts.append(f"train {what} {_percent(evaluator.measure(trainer, train))}")
    if val is not None:
        m = evaluator.measure(trainer, val)
        parts.append(f"val loss {m.loss:.4f}")
        if m.accuracy is not None:
            parts.append(f"val {what} {_percent(m)}")
    return ", ".join(parts)


def _percent(m: Measure) -> str:
    return f"{100 * m.accuracy:.1f}%" if m.accuracy is not None else "n/a"


# -- arguments -------------------------------------------------------------------------------

def _step_flags(p: argparse.ArgumentParser, seed: Any) -> None:
    """The flags of the training step, shared by ``train-step`` and ``train``."""
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam",
                   help="torch.optim's algorithm of that name (default adam)")
    p.add_argument("--lr", type=real(), help="learning rate (default 0.01 for sgd, 1e-3 "
                                             "for adam and adamw)")
    p.add_argument("--momentum", type=real(), help="sgd only (default 0)")
    p.add_argument("--dampening", type=real(), help="sgd only (default 0)")
    p.add_argument("--nesterov", action="store_true", help="sgd only: Nesterov momentum")
    p.add_argument("--weight-decay", type=real(), help="default 0 (adamw: 0.01)")
    p.add_argument("--betas", type=real(below=1.0), nargs=2, metavar=("B1", "B2"),
                   help="adam and adamw (default 0.9 0.999)")
    p.add_argument("--eps", type=real(), default=1e-8,
                   help="adam and adamw (default 1e-8; float16 parameters need one float16 "
                        "holds, e.g. 1e-4)")
    p.add_argument("--schedule", choices=["warmup-cosine", "warmup-linear"],
                   help="learning-rate schedule computed in the step from its step counter "
                        "(transformers' get_cosine/linear_schedule_with_warmup); needs "
                        "--total-steps")
    p.add_argument("--warmup-steps", type=integer(0), metavar="W",
                   help="updates over which the learning rate rises from 0 (default 0)")
    p.add_argument("--total-steps", type=integer(1), metavar="T",
                   help="the update at which the schedule reaches 0")
    p.add_argument("--max-grad-norm", type=real(above=True), metavar="NORM",
                   help="clip the trained gradients to this global L2 norm before the update "
                        "(torch.nn.utils.clip_grad_norm_)")
    p.add_argument("--loss", choices=list(LOSSES),
                   help="applied to the first output: cross_entropy adds the input labels "
                        "(int64 class indices), mse the input target; without it the first "
                        "output is the loss (train: unless it has more than one element; "
                        "then cross_entropy if the data file holds labels, mse if target)")
    p.add_argument("--class-axis", type=integer(), metavar="AXIS",
                   help="cross_entropy: the axis of the first output that holds the classes "
                        "(default 1; -1 for a language model's [N, T, V] logits, whose labels "
                        "are then [N, T])")
    p.add_argument("--ignore-index", type=integer(INT64_MIN, INT64_MAX), metavar="LABEL",
                   help="cross_entropy: a label value the loss leaves out, its mean taken over "
                        "the other labels (PyTorch's ignore_index, e.g. -100 for padding); "
                        "train refuses other labels outside the class range")
    p.add_argument("--train", action="append", metavar="PATTERN",
                   help="train only the parameters with this name or fnmatch pattern, e.g. "
                        "'*lora_*' (repeatable; default all)")
    p.add_argument("--frozen", action="append", metavar="PATTERN",
                   help="keep the parameters with this name or fnmatch pattern fixed, e.g. "
                        "'encoder.layer.0.*' (repeatable)")
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
    _step_flags(p, seed)
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
    p.add_argument("--val-data", metavar="VAL.npz",
                   help="held-out data (arrays as --data): its mean loss and accuracy are "
                        "printed after each epoch")
    p.add_argument("-o", "--output", required=True, help="the trained model (.onnx)")
    _step_flags(p, seed)
    p.add_argument("--epochs", type=integer(1), default=1,
                   help="passes over the data (default 1)")
    p.add_argument("--batch-size", type=integer(1),
                   help=f"examples per step (default: the model's fixed batch, else "
                        f"{DEFAULT_BATCH})")
    p.add_argument("-t", "--target", default="c", choices=["c", "numpy", "onnx", "reference"],
                   help="where the step runs (default c)")
    p.add_argument("--threads", type=integer(1), help="threads of the c and onnx targets")
    p.add_argument("--spin-count", type=integer(0), metavar="N",
                   help="c target: how long an idle OpenMP thread busy-waits before it sleeps, "
                        "in libgomp's spins (GOMP_SPINCOUNT; default 1000, about 50 us; 0 "
                        "sleeps at once, best when other processes keep every core busy)")
    p.add_argument("--curve", metavar="FILE.svg",
                   help="the loss curve (default: OUTPUT without .onnx, plus .loss.svg; '' "
                        "for none)")
    p.add_argument("--checkpoint", metavar="FILE.npz",
                   help="save the state here after every epoch (Trainer.save)")
    p.add_argument("--resume", metavar="FILE.npz", help="start from a saved state")
    p.set_defaults(fn=lambda a: cmd_train(a, load_graph))


__all__ = ["add_parsers", "cmd_train", "cmd_train_step", "optimizer_from", "schedule_from",
           "step_options"]
