"""Helper functions for generated NumPy modules: the reference code, copied as source text.

The NumPy target calls these helpers for the ops whose reference is more than one vectorized
expression (max pooling, resample, reduce_sum). Their text is taken from ``gradc.ir.ops`` with
``inspect.getsource``, comments included; only the signature (no ``self``, no annotations) and
a few names change (private helper names, ``itertools.product`` -> a NumPy-only ``_product``),
at positions found with ``ast``. So the generated module stands alone and computes exactly what
the reference computes, in the same order.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import symtable
import textwrap
from typing import Callable

from gradc.errors import GradcError

# gradc.ir.ops re-exports builders under the module names, so load the modules themselves.
common = importlib.import_module("gradc.ir.ops.common")
math = importlib.import_module("gradc.ir.ops.arith")
pooling = importlib.import_module("gradc.ir.ops.pooling")
resample = importlib.import_module("gradc.ir.ops.resample")

# Helper name in the generated module -> the reference function or method it copies.
COPIED: dict[str, Callable] = {
    "_window_argmax": pooling.window_argmax,
    "_lowest": common.lowest,
    "_store": common.store,
    "_axis_taps": resample.axis_taps,
    "_all_taps": resample.all_taps,
    "_bshape": resample._bshape,
    "_scatter_canonical": resample.scatter_canonical,
    "_max_pooling": pooling.MaxPooling.reference,
    "_max_pooling_grad": pooling.MaxPoolingGrad.reference,
    "_resample": resample.Resample.reference,
    "_resample_grad": resample.ResampleGrad.reference,
    "_reduce_sum": math.ReduceSum.reference,
}

# Names the copied code uses for other helpers.
RENAMES = {
    "window_argmax": "_window_argmax", "lowest": "_lowest", "store": "_store",
    "acc_dtype": "_acc_dtype", "axis_taps": "_axis_taps", "all_taps": "_all_taps",
    "_bshape": "_bshape", "scatter_canonical": "_scatter_canonical",
}

_PRODUCT = '''\
def _product(*pools):
    """itertools.product (row-major tuples) with NumPy only."""
    pools = [tuple(p) for p in pools]
    for k in np.ndindex(*(len(p) for p in pools)):
        yield tuple(p[i] for p, i in zip(pools, k))
'''


_KEEP = '''\
def _keep(mask, v, out=None):
    """``v`` where ``mask`` holds and +0 elsewhere, bit for bit as np.where(mask, v, 0).

    Floats are multiplied as unsigned-integer bit patterns by 0 or 1: that keeps NaN payloads,
    infinities and -0.0 where ``mask`` holds (a float multiply would not), and it runs at
    memory speed, where np.where branches per element (slow on unpredictable masks).
    """
    if v.dtype.kind == "f":
        bits = np.dtype(f"u{v.dtype.itemsize}")
        r = np.multiply(v.view(bits), mask, out=None if out is None else out.view(bits))
        return np.asarray(r).view(v.dtype)
    return np.asarray(np.multiply(v, mask, out=out))
'''


def _acc_dtype_source() -> str:
    """``_acc_dtype``: the ACC table of ``gradc.ir.ops.common`` keyed by dtype name."""
    rows = "".join(f"    {d.value!r}: np.{t.__name__},\n" for d, t in common.ACC.items())
    return (
        f"_ACC = {{\n{rows}}}\n\n\n"
        "def _acc_dtype(dtype):\n"
        '    """The accumulation type of a tensor dtype (SPEC.md 1.6)."""\n'
        "    return _ACC[np.dtype(dtype).name]\n"
    )


def _edits(fn: ast.FunctionDef, first: int) -> list[tuple[int, int, int, str]]:
    """(line, start byte, end byte, text) of every rename in the body (lines >= ``first``)."""
    out = []
    for node in ast.walk(fn):
        if node is fn or getattr(node, "lineno", 0) < first:
            continue
        if isinstance(node, ast.Name) and node.id in RENAMES:
            text = RENAMES[node.id]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "itertools" and node.attr == "product"):
            text = "_product"
        else:
            continue
        if node.end_lineno != node.lineno:
            raise GradcError("internal error: numpy target: a name split over lines")
        out.append((node.lineno, node.col_offset, node.end_col_offset or 0, text))
    return out


def _copy(name: str, func: Callable) -> str:
    """The source of ``func`` as a module-level function ``name``: the reference's own text and
    comments, with a plain signature (no ``self``, no annotations) and private helper names."""
    src = textwrap.dedent(inspect.getsource(func))
    fn = ast.parse(src).body[0]
    if not isinstance(fn, ast.FunctionDef) or fn.body[0].lineno <= fn.lineno:
        raise GradcError(f"internal error: numpy target: cannot copy {func.__qualname__}")
    args = fn.args
    if args.args and args.args[0].arg == "self":
        args.args = args.args[1:]
    for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
        if a is not None:
            a.annotation = None
    first = fn.body[0].lineno
    lines = [line.encode() for line in src.splitlines()]
    for row, start, end, text in sorted(_edits(fn, first), reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + text.encode() + line[end:]
    body = "\n".join(line.decode() for line in lines[first - 1:])
    body = body.replace("\u00a7", "section ").encode("ascii", "replace").decode("ascii")
    origin = f"# {name}: a copy of {func.__module__}.{func.__qualname__}\n"
    return f"{origin}def {name}({ast.unparse(args)}):\n{body}\n"


def _source(name: str) -> str:
    if name == "_product":
        return _PRODUCT
    if name == "_keep":
        return _KEEP
    if name == "_acc_dtype":
        return _acc_dtype_source()
    return _copy(name, COPIED[name])


ALL = ("_product", "_acc_dtype", "_keep") + tuple(COPIED)
_ALLOWED = set(ALL) | set(dir(builtins)) | {"np", "_ACC"}


def _globals_of(src: str) -> set[str]:
    """Every global name the functions in ``src`` use, nested scopes included."""
    out: set[str] = set()
    todo = list(symtable.symtable(src, "<helper>", "exec").get_children())
    while todo:
        t = todo.pop()
        if isinstance(t, symtable.Function):
            out.update(t.get_globals())
        todo.extend(t.get_children())
    return out


_CACHE: dict[str, tuple[str, frozenset[str]]] = {}


def helper(name: str) -> tuple[str, frozenset[str]]:
    """(source text, helpers it calls) of one helper; checks it needs nothing but NumPy."""
    if name not in _CACHE:
        src = _source(name)
        used = _globals_of(src)
        bad = sorted(used - _ALLOWED)
        if bad:
            raise GradcError(f"internal error: numpy target: helper {name} uses {bad}, which "
                             "the generated module does not define")
        _CACHE[name] = (src, frozenset(used & set(ALL)) - {name})
    return _CACHE[name]


def closure(names: set[str]) -> list[str]:
    """The helpers ``names`` need (transitively), in a fixed order."""
    todo, seen = list(names), set()
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(helper(n)[1])
    return [n for n in ALL if n in seen]


def helpers_source(names: set[str]) -> str:
    """The text of the helpers ``names`` need, separated by blank lines."""
    return "\n\n".join(helper(n)[0] for n in closure(names))
