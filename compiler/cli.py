"""The ``gradc`` command line: one subcommand per stage; bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

from gradc.api import artifact, compile, from_onnx, grad, to_onnx
from gradc.backends import TARGETS
from gradc.backends.c.emit import ARENA_LINE
from gradc.check import compare_targets, random_inputs, run_check
from gradc.cli_args import seed as _seed
from gradc.cli_train import add_parsers as add_train_parsers
from gradc.errors import GradcError
from gradc.examples import EXAMPLES, example
from gradc.files import check_input_file, check_output_file, write_bytes_atomically, wrote
from gradc.ir.core import Graph
from gradc.ir.types import MAX_DIM
from gradc.ir.parser import parse
from gradc.passes import instruments_from_flags
from gradc.show import show
from gradc.torch_frontend import load_pt2
from gradc.ir.verify import verify

EXIT_USAGE = 2
EXIT_INTERNAL = 70
# Every option that names a file a command reads or writes: checked before any work (main).
INPUT_FILES = (("file", ""), ("parameters", "--parameters"), ("data", "--data"),
               ("val_data", "--val-data"), ("resume", "--resume"))
OUTPUT_FILES = (("output", "-o"), ("curve", "--curve"), ("checkpoint", "--checkpoint"))


class CliError(GradcError):
    """A command-line problem reported as one line."""


def load_parameters(path: str | None) -> dict[str, np.ndarray] | None:
    """The arrays of a ``--parameters`` file (``.npz``: one array per parameter name)."""
    if path is None:
        return None
    check_input_file(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as e:
        raise CliError(f"{path}: not a readable .npz file ({e.__class__.__name__}: {e})") \
            from None


def load_graph(path: str, parameters: str | None = None) -> Graph:
    """Read a graph from ``example:NAME``, a ``.onnx`` file, a ``.pt2`` file (written by
    ``torch.export.save``; read with ``gradc.from_torch``'s translation) or a text-IR file
    (whose parameter values come from the ``parameters`` .npz file; without it, they have
    none)."""
    if path.startswith("example:"):
        return example(path[len("example:"):])
    check_input_file(path)
    if path.endswith((".onnx", ".pt2")):
        try:
            return from_onnx(path) if path.endswith(".onnx") else load_pt2(path)
        except GradcError as e:
            if str(e).startswith(path):
                raise
            named = type(e)(f"{path}: {e}")
            if hasattr(e, "problems"):
                named.problems = e.problems  # type: ignore[attr-defined]
            raise named from None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"{path}: cannot read text IR ({e.__class__.__name__}: {e})") from None
    values = load_parameters(parameters)
    try:
        return parse(text, parameters=values)
    except GradcError as e:
        raise type(e)(f"{path}:{e}") from None


def _load(args: argparse.Namespace) -> Graph:
    values = getattr(args, "parameters", None)
    return load_graph(args.file) if values is None else load_graph(args.file, values)


def write_graph(path: str, g: Graph, as_text: bool = False) -> str:
    """Write a graph as ONNX (``.onnx``, unless ``as_text``) or text IR; the text's parameter
    values go to ``PATH.npz`` (the text holds none). Returns what was written, for messages."""
    if path.endswith(".onnx") and not as_text:
        write_atomic(path, to_onnx(g).SerializeToString())
        return path
    write_atomic(path, str(g) + "\n")
    values = {p.name: p.value for p in g.parameters if p.value is not None}
    if not values:
        return path
    with tempfile.TemporaryFile() as f:
        np.savez(f, **values)  # type: ignore[arg-type]
        f.seek(0)
        write_atomic(path + ".npz", f.read())
    return f"{path} (parameter values: {path}.npz, read with --parameters)"


def write_atomic(path: str, data: bytes | str) -> None:
    """Write a file so that readers see the old file or the whole new one, never a part."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CliError(f"{path}: folder {folder} does not exist")
    write_bytes_atomically(path, raw)


def parse_shapes(items: Sequence[str] | None) -> dict[str, int]:
    """``["N=2", "T=5"]`` -> ``{"N": 2, "T": 5}``."""
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if (not sep or not name or not re.fullmatch(r"[0-9]{1,19}", value)
                or not 1 <= int(value) <= MAX_DIM):
            raise CliError(f"--shape {item!r}: expected NAME=SIZE with SIZE in [1, 2**63 - 1]")
        out[name] = int(value)
    return out


SUMMARY_CHUNK = 1 << 20  # elements widened to float64 at a time (never a copy of the output)


def summarize(name: str, a: np.ndarray) -> str:
    """One line per array: shape, dtype and a few statistics (NaN left out)."""
    stats = ""
    if a.size and a.dtype.kind in "fiu":
        lo, hi, total, seen = np.inf, -np.inf, 0.0, False
        flat = a.reshape(-1)
        with np.errstate(all="ignore"):  # inf + -inf in the sum is NaN, said as such
            for i in range(0, flat.size, SUMMARY_CHUNK):
                f = flat[i:i + SUMMARY_CHUNK].astype(np.float64)
                f = f[~np.isnan(f)]
                if f.size:
                    lo, hi = min(lo, f.min()), max(hi, f.max())
                    total, seen = total + f.sum(), True
        stats = f" min={lo:.6g} max={hi:.6g} sum={total:.6g}" if seen else " all NaN"
    return f"  {name}: {a.dtype}{list(a.shape)}{stats}"


# -- subcommands -----------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    g = _load(args)
    verify(g)
    params = f"{len(g.parameters)} parameters, " if g.parameters else ""
    print(f"{args.file}: ok: graph {g.name!r}, {len(g.inputs)} inputs, {params}"
          f"{len(g.nodes)} nodes, {len(g.outputs)} outputs")
    return 0


def cmd_print(args: argparse.Namespace) -> int:
    g = _load(args)
    if args.output:
        wrote(write_graph(args.output, g, as_text=True))
    else:
        sys.stdout.write(str(g) + "\n")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    g = _load(args)
    shapes = parse_shapes(args.shape)
    ex = compile(g, target=args.target, passes=_passes(args), shapes=shapes)
    feeds = random_inputs(g, shapes, args.seed)
    out = ex(**feeds)
    print(f"graph {g.name!r} on target {args.target} with random inputs (seed {args.seed}):")
    for k, v in feeds.items():
        print(summarize(k, v))
    print("outputs:")
    for k, v in out.items():
        print(summarize(k, v))
    return 0


def cmd_grad(args: argparse.Namespace) -> int:
    g = _load(args)
    t = grad(g, _wrt(args.wrt))
    if args.check:
        _check_onnx_agrees(t, parse_shapes(args.shape))
    written = write_graph(args.output, t)
    params = f"; {len(t.parameters)} parameters" if t.parameters else ""
    wrote(written, f"training graph {t.name!r} with {len(t.nodes)} nodes; inputs "
          f"{', '.join(v.name for v in t.inputs)}{params}; outputs "
          f"{', '.join(v.name for v in t.outputs)}")
    return 0


def _wrt(given: Sequence[Sequence[str]] | None) -> str | list[str] | None:
    """``--wrt`` values: one keyword (inputs, parameters, all) or names."""
    names = [n for group in given or [] for n in group]
    keywords = [n for n in names if n in ("inputs", "parameters", "all")]
    if not keywords:
        return names or None
    if len(names) > 1:
        raise CliError(f"--wrt: expected one of inputs, parameters, all alone, or names, got "
                       f"{' '.join(names)}")
    return keywords[0]


def _check_onnx_agrees(t: Graph, shapes: dict[str, int]) -> None:
    rows, ok = compare_targets(t, ["onnx"], shapes)
    for line in rows:
        print(line)
    if not ok:
        raise CliError("the ONNX training graph disagrees with the reference target")
    print("onnxruntime agrees with the reference target on every output")


def cmd_check(args: argparse.Namespace) -> int:
    g = _load(args)
    return run_check(g, grad=args.grad, shapes=parse_shapes(args.shape), seed=args.seed,
                     targets=args.targets.split(",") if args.targets else None)


def cmd_compile(args: argparse.Namespace) -> int:
    g = _load(args)
    data = artifact(g, args.target, passes=_passes(args), shapes=parse_shapes(args.shape),
                    instruments=_instruments(args))
    if args.pass_statistics and args.target == "c" and isinstance(data, str):
        # the C program's planned memory: its header names the arena of intermediate values
        for line in data.splitlines()[:200]:
            if ARENA_LINE in line:
                arena = line.split(ARENA_LINE, 1)[1].strip(" )")
                print(f"c target: {ARENA_LINE} {arena}", file=sys.stderr)
                break
        else:
            print("c target: no planned arena (values of symbolic shape are allocated per "
                  "call)", file=sys.stderr)
    return _write_output(args, data)


def _write_output(args: argparse.Namespace, data: bytes | str) -> int:
    if args.output:
        write_atomic(args.output, data)
        wrote(args.output)
    elif isinstance(data, str):
        sys.stdout.write(data)
    else:
        raise CliError("ONNX output is binary: give -o FILE")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    g = _load(args)
    text = show(g, fmt=args.format, passes=_passes(args), shapes=parse_shapes(args.shape))
    if args.output:
        write_atomic(args.output, text)
        wrote(args.output)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _passes(args: argparse.Namespace) -> Any:
    p = getattr(args, "passes", None)
    if p is None:
        return "default"
    if p in ("none", ""):
        return None
    return p


def _instruments(args: argparse.Namespace) -> list:
    return instruments_from_flags(print_after_all=args.print_after_all,
                                  print_after_change=args.print_after_change,
                                  diff=args.print_diff, time_passes=args.time_passes,
                                  statistics=args.pass_statistics, dump_ir=args.dump_ir,
                                  stream=sys.stderr)


# -- argument parsing ------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, passes: bool = False) -> None:
    p.add_argument("file", help="a .onnx file, a .pt2 file (torch.export.save), a text-IR "
                                "file, or example:NAME")
    p.add_argument("--parameters", metavar="FILE.npz",
                   help="values of a text-IR file's parameters (the text holds none)")
    p.add_argument("--shape", action="append", metavar="NAME=SIZE",
                   help="value of a symbolic dim (repeatable)")
    if passes:
        p.add_argument("-p", "--passes", metavar="PASS,PASS",
                       help="comma-separated pass names, 'default' or 'none'")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    ap = argparse.ArgumentParser(prog="gradc", description="A compiler for training graphs.")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("verify", help="check a graph and print a one-line summary")
    _common(p)
    p.set_defaults(fn=cmd_verify)

    p = sub.add_parser("print", help="print a graph in the text IR")
    _common(p)
    p.add_argument("-o", "--output", help="write to a file instead of stdout")
    p.set_defaults(fn=cmd_print)

    p = sub.add_parser("run", help="run a graph on random inputs and summarize the outputs")
    _common(p, passes=True)
    p.add_argument("-t", "--target", default="reference",
                   choices=list(TARGETS))
    p.add_argument("--seed", type=_seed, default=0)
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("grad", help="differentiate a forward graph into its training graph")
    _common(p)
    p.add_argument("-o", "--output", required=True, help="output file (.onnx, or text IR)")
    p.add_argument("--wrt", action="append", nargs="+", metavar="NAME",
                   help="what to differentiate: inputs (default), parameters, all, or input and "
                        "parameter names")
    p.add_argument("--check", action="store_true",
                   help="run the result in onnxruntime and compare with the reference target")
    p.set_defaults(fn=cmd_grad)

    p = sub.add_parser("compile", help="optimize and lower a graph for a target")
    _common(p, passes=True)
    p.add_argument("-t", "--target", required=True,
                   choices=[k for k, t in TARGETS.items() if t.artifact_kind is not None])
    p.add_argument("-o", "--output", help="output file (default: stdout for text)")
    p.add_argument("--print-after-all", action="store_true", help="print the IR after each pass")
    p.add_argument("--print-after-change", action="store_true",
                   help="print the IR after each pass that changed it")
    p.add_argument("--print-diff", action="store_true",
                   help="print a unified diff of the IR for each pass that changed it")
    p.add_argument("--time-passes", action="store_true", help="print the time of each pass")
    p.add_argument("--pass-statistics", action="store_true",
                   help="print each pass's counters (nodes removed, fused, rewritten by rule, "
                        "estimated memory traffic)")
    p.add_argument("--dump-ir", metavar="DIR", help="write each stage's IR to DIR")
    p.set_defaults(fn=cmd_compile)

    p = sub.add_parser("show", help="look at a graph before and after the passes")
    _common(p, passes=True)
    p.add_argument("--format", default="text", choices=["text", "dot", "html"])
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(fn=cmd_show)

    p = sub.add_parser("check", help="run on every target and report differences")
    _common(p)
    p.add_argument("--grad", action="store_true", help="check the training graph too")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--targets", help="comma-separated targets (default: all)")
    p.set_defaults(fn=cmd_check)

    add_train_parsers(sub, _seed, load_graph, write_graph)  # train-step, train

    p = sub.add_parser("examples", help="list the built-in example graphs")
    p.set_defaults(fn=lambda a: _list_examples())
    return ap


def _list_examples() -> int:
    for name, fn in sorted(EXAMPLES.items()):
        print(f"example:{name:12} {(fn.__doc__ or '').strip()}")
    return 0


def _naming_file(args: argparse.Namespace, msg: str) -> str:
    """The message with the input file in front, unless it already names it."""
    path = getattr(args, "file", None)
    named = [getattr(args, dest, None) for dest, _ in INPUT_FILES + OUTPUT_FILES]
    if not path or any(n and msg.startswith(n) for n in named):
        return msg  # already names the file (or a data or output file of the command)
    return f"{path}: {msg}"


def check_files(args: argparse.Namespace) -> None:
    """Every file a command reads exists and every file it writes can be written, before the
    command does any work (so ``grad --check -o missing/x.onnx`` stops at once)."""
    for dest, _ in INPUT_FILES:
        path = getattr(args, dest, None)
        if path and not (dest == "file" and path.startswith("example:")):
            check_input_file(path)
    for dest, flag in OUTPUT_FILES:
        path = getattr(args, dest, None)
        if path:
            check_output_file(path, flag)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gradc`` command."""
    ap = build_parser()
    args = ap.parse_args(argv)
    fn: Callable[[argparse.Namespace], int] = args.fn
    try:
        check_files(args)
        return fn(args)
    except GradcError as e:
        if args.debug:
            raise
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"gradc: error: {_naming_file(args, msg)}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError as e:
        if args.debug:
            raise
        msg = f"out of memory{f' ({e})' if str(e) else ''}"
        print(f"gradc: error: {_naming_file(args, msg)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        if args.debug:
            raise
        print(f"gradc: error: {_naming_file(args, str(e) or type(e).__name__)}",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug in gradc, not bad input: still one line unless --debug
        if args.debug:
            raise
        print(f"gradc: internal error: {type(e).__name__}: {e} (run with --debug for the "
              "traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
