"""Safe text for generated NumPy modules: identifiers, escaped strings, exact number literals.

Nothing a user supplied (graph, value or symbol names) reaches generated code verbatim: names
become ASCII identifiers (``sanitize``, made unique by ``Namer``), and the original strings
appear only as ``ascii()`` literals (``string``), which cannot contain a line break, a quote
that ends them, or any non-ASCII character.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import math
import re
from typing import Any

import numpy as np

from gradc.errors import GradcError
from gradc.ir.types import DType

MODULE_NAMES = ("np", "GRAPH_NAME", "INPUT_NAMES", "OUTPUT_NAMES", "ENTRY")
RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) \
    | frozenset(MODULE_NAMES)
SMALL_CONSTANT = 16  # elements; larger constants (and any with NaN or inf) are stored as bytes


def sanitize(name: str, limit: int = 40) -> str:
    """An ASCII identifier from ``name``: never reserved, never starting with ``_``.

    A name that starts with a digit (gradc's automatic names) gets a ``t`` (temporary), any
    other name that does not start with a letter a ``v``.
    """
    base = re.sub(r"[^0-9A-Za-z_]+", "_", name)[:limit]
    if not base or not base[0].isalpha():
        base = ("t" if base[:1].isdigit() else "v") + base
    return base + "_" if base in RESERVED else base


class Namer:
    """Unique sanitized identifiers in one namespace."""

    def __init__(self) -> None:
        self.used: set[str] = set(RESERVED)

    def __call__(self, hint: str) -> str:
        base = sanitize(hint)
        name, k = base, 2
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def string(s: str) -> str:
    """A pure-ASCII Python literal for ``s`` that evaluates back to exactly ``s``."""
    text = ascii(s)
    if ast.literal_eval(text) != s or "\n" in text or "\r" in text:
        raise GradcError(f"internal error: numpy target: cannot escape {s!r}")
    return text


def show(name: str) -> str:
    """A name for a comment: bare when plain, else escaped (so never a line break)."""
    if re.fullmatch(r"[A-Za-z0-9_.]{1,40}", name):
        return name
    text = ascii(name)
    return text if len(text) <= 60 else text[:57] + "..."


def number(v: Any) -> str:
    """An exact Python literal for an int or a float (inf and NaN through ``np``)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise GradcError(f"internal error: numpy target: expected a number, got {v!r}")
    if isinstance(v, int):
        return repr(v)
    if math.isnan(v):
        return "np.nan"
    if math.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(v)  # repr round-trips every finite float exactly


def literal(v: Any) -> str:
    """Code for an attribute value: numbers, strings, bools, tuples, None."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, (int, float)):
        return number(v)
    if isinstance(v, (tuple, list)):
        items = [literal(x) for x in v]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    raise GradcError(f"internal error: numpy target: no literal for {type(v).__name__}")


def dtype_expr(d: DType) -> str:
    """The NumPy scalar type of a dtype, as code (``np.float32``)."""
    return "np.bool_" if d is DType.bool else f"np.{d.value}"


def scalar(d: DType, v: Any) -> str:
    """A NumPy scalar of dtype ``d`` holding ``v`` exactly (``np.float16(1.0)``)."""
    return f"{dtype_expr(d)}({number(v)})"


def array_literal(a: np.ndarray) -> str:
    """Code for an exact copy of ``a``: a list literal when small and finite, else raw bytes
    (little-endian, so NaN payloads and -0.0 survive on any machine)."""
    d = DType.of(a.dtype)
    shape = literal(tuple(int(n) for n in a.shape))
    if a.size <= SMALL_CONSTANT and (a.dtype.kind != "f" or bool(np.isfinite(a).all())):
        return f"np.array({a.tolist()!r}, {dtype_expr(d)})"
    little = a.dtype.newbyteorder("<")
    data = np.ascontiguousarray(a, dtype=little).tobytes()
    chunks = [repr(data[i:i + 24]) for i in range(0, len(data), 24)]
    body = "\n    ".join(chunks)
    return (f"np.frombuffer(\n    {body},\n    {little.str!r}).astype({dtype_expr(d)})"
            f".reshape({shape})")
