"""Helper functions for generated NumPy modules: the reference code, copied as source text.

The NumPy target calls a helper for each op whose reference is more than one vectorized
expression (max pooling, resample, reduce_sum): ``reference_helper(op)`` names it ``_<op>``, a
copy of the op's ``OpDef.reference``. Nothing lists what to copy: the functions of
``gradc.ir.ops`` that a copied function calls are found in its syntax tree and copied too,
transitively, each renamed with a leading underscore. The text is taken with
``inspect.getsource``, comments included; only the signature (no ``self``, no annotations) and
those names change (and ``itertools.product`` -> a NumPy-only ``_product``), at positions found
with ``ast``. So the generated module stands alone and computes exactly what the reference
computes, in the same order.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import symtable
import textwrap
from typing import Callable

from gradc.errors import GradcError
from gradc.ir.ops import REGISTRY
from gradc.ir.ops import common

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


_INPUT_ERROR = '''\
class InputError(ValueError):
    """Input values this graph cannot take (an index out of range): nothing was computed."""
'''


def _acc_dtype_source() -> str:
    """``_acc_dtype``: the ACC table of ``gradc.ir.ops.common`` keyed by dtype name."""
    rows = "".join(f"    {d.value!r}: np.{t.__name__},\n" for d, t in common.ACC.items())
    return (
        f"_ACC = {{\n{rows}}}\n\n\n"
        "def _acc_dtype(dtype):\n"
        '    """The accumulation type of a tensor dtype (float32 for float16)."""\n'
        "    return _ACC[np.dtype(dtype).name]\n"
    )


def _private(name: str) -> str:
    return name if name.startswith("_") else "_" + name


def _callees(func: Callable, fn: ast.FunctionDef) -> dict[str, Callable]:
    """The functions of ``gradc.ir.ops`` that ``func`` reads by a global name."""
    scope = getattr(func, "__globals__", {})
    out: dict[str, Callable] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id in scope:
            v = scope[node.id]
            if inspect.isfunction(v) and v.__module__.startswith("gradc.ir.ops."):
                out[node.id] = v
    return out


def _edits(fn: ast.FunctionDef, first: int,
           renames: dict[str, str]) -> list[tuple[int, int, int, str]]:
    """(line, start byte, end byte, text) of every rename in the body (lines >= ``first``)."""
    out = []
    for node in ast.walk(fn):
        if node is fn or getattr(node, "lineno", 0) < first:
            continue
        if isinstance(node, ast.Name) and node.id in renames:
            text = renames[node.id]
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
    callees = _callees(func, fn)
    renames = {k: _private(k) for k in callees}
    for k, f in callees.items():
        if f is not common.acc_dtype:  # _acc_dtype is generated from the ACC table
            _FUNCS.setdefault(_private(k), f)
    lines = [line.encode() for line in src.splitlines()]
    for row, start, end, text in sorted(_edits(fn, first, renames), reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + text.encode() + line[end:]
    body = "\n".join(line.decode() for line in lines[first - 1:])
    body = body.replace("\u00a7", "section ").encode("ascii", "replace").decode("ascii")
    origin = f"# {name}: a copy of {func.__module__}.{func.__qualname__}\n"
    return f"{origin}def {name}({ast.unparse(args)}):\n{body}\n"


# Standard-library modules a copied helper may use: the module imports them when it does (the
# C library's erf, which NumPy lacks, is ``math.erf``).
STDLIB = ("math",)
FIXED = ("_product", "_acc_dtype", "_keep", "InputError")  # written here, not copied
_FUNCS: dict[str, Callable] = {}  # helper name -> the function it copies (filled on demand)


def reference_helper(op: str) -> str:
    """The name of the helper that copies ``op``'s reference: ``_<op>``."""
    name = _private(op)
    _FUNCS.setdefault(name, type(REGISTRY[op]).reference)
    return name


def _source(name: str) -> str:
    if name == "_product":
        return _PRODUCT
    if name == "_keep":
        return _KEEP
    if name == "InputError":  # raised by copies of references that check values (gather)
        return _INPUT_ERROR
    if name == "_acc_dtype":
        return _acc_dtype_source()
    if name not in _FUNCS:
        raise GradcError(f"internal error: numpy target: no helper {name}")
    return _copy(name, _FUNCS[name])


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


_CACHE: dict[str, tuple[str, tuple[str, ...]]] = {}


def helper(name: str) -> tuple[str, tuple[str, ...]]:
    """(source text, helpers it calls) of one helper; checks it needs nothing but NumPy."""
    if name not in _CACHE:
        src = _source(name)
        used = _globals_of(src)
        known = set(FIXED) | set(_FUNCS)
        bad = sorted(used - known - set(dir(builtins)) - {"np", "_ACC"} - set(STDLIB))
        if bad:
            raise GradcError(f"internal error: numpy target: helper {name} uses {bad}, which "
                             "the generated module does not define")
        _CACHE[name] = (src, tuple(sorted((used & known) - {name})))
    return _CACHE[name]


def closure(names: set[str]) -> list[str]:
    """The helpers ``names`` need (transitively): the fixed ones first, then each helper after
    the helpers it calls, in a fixed order."""
    order: list[str] = []

    def visit(n: str) -> None:
        if n not in order:
            for m in helper(n)[1]:
                if m not in order:
                    visit(m)
            order.append(n)

    for n in sorted(names):
        visit(n)
    return [n for n in FIXED if n in order] + [n for n in order if n not in FIXED]


def helpers_source(names: set[str]) -> str:
    """The text of the helpers ``names`` need, separated by blank lines."""
    return "\n\n".join(helper(n)[0] for n in closure(names))



def stdlib_imports(names: set[str]) -> list[str]:
    """The standard-library modules (of ``STDLIB``) that the helpers ``names`` need use."""
    used: set[str] = set()
    for n in closure(names):
        used |= _globals_of(helper(n)[0])
    return [m for m in STDLIB if m in used]
