"""Argument checks of the training composites (SPEC-training.md §9.6): losses, optimizers,
dropout. A composite has no node type, so it validates its own arguments when called, with
SPEC.md §1.5's messages (``<op>: <field>: expected <what>, got <given>``), before it builds any
node; the primitives it then builds check theirs again.
"""

from __future__ import annotations

from typing import Any, NoReturn, Sequence

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.core import Graph, Value
from gradc.ir.ops.adam import check_real
from gradc.ir.ops.common import F
from gradc.ir.ops.registry import fmt_shape, show_value
from gradc.ir.types import DType

__all__ = ["ArgCheck", "check_real"]


class ArgCheck:
    """The checks of one composite call, reported under the composite's name."""

    def __init__(self, op: str) -> None:
        self.op = op
        self._graph: tuple[Graph, str] | None = None  # the first value's graph, and its field

    def fail(self, field: str, expected: str, got: object) -> NoReturn:
        """Raise ``<op>: <field>: expected <expected>, got <got>``."""
        raise VerifyError(f"{self.op}: {field}: expected {expected}, got {show_value(got)}")

    def value(self, field: str, v: Any) -> Value:
        """A gradc value (not an array or a number) of the same graph as the call's other
        values (a value made without a graph, such as a constant, joins theirs)."""
        if not isinstance(v, Value):
            self.fail(field, "a gradc value", type(v).__name__)
        if v.graph is not None:
            if self._graph is None:
                self._graph = (v.graph, field)
            elif v.graph is not self._graph[0]:
                g, first = self._graph
                self.fail(field, f"a value of graph {g.name!r} (that of {first})",
                          f"%{v.name} of graph {v.graph.name!r}")
        return v

    def dtype_in(self, field: str, v: Value, allowed: Sequence[DType]) -> None:
        """``v``'s dtype is one of ``allowed``."""
        if v.type.dtype not in allowed:
            self.fail(f"{field}.dtype", "one of " + ", ".join(d.value for d in allowed),
                      v.type.dtype)

    def floating(self, field: str, v: Any, lo: int = 0, hi: int = 8) -> Value:
        """A float value of rank ``lo..hi``."""
        v = self.value(field, v)
        self.dtype_in(field, v, F)
        if not lo <= v.type.rank <= hi:
            self.fail(f"{field}.rank", f"{lo}..{hi}", v.type.rank)
        return v

    def like(self, field: str, v: Any, ref: Value, ref_field: str) -> Value:
        """A value of ``ref``'s dtype and shape."""
        v = self.value(field, v)
        if v.type.dtype != ref.type.dtype:
            self.fail(f"{field}.dtype", f"{ref.type.dtype} (same as {ref_field})", v.type.dtype)
        if v.type.shape != ref.type.shape:
            self.fail(f"{field}.shape", f"{fmt_shape(ref.type.shape)} (same as {ref_field})",
                      fmt_shape(v.type.shape))
        return v

    def step(self, field: str, v: Any) -> Value:
        """A one-element integer step counter (int32, int64 or uint32), as adam_optimizer's."""
        v = self.value(field, v)
        if v.type.rank > 8 or any(d != 1 for d in v.type.shape):
            self.fail(f"{field}.shape", "one element (every dim 1, rank 0..8)",
                      fmt_shape(v.type.shape))
        self.dtype_in(field, v, (DType.int32, DType.int64, DType.uint32))
        return v

    def real(self, field: str, v: Any, lo: float | None = None, hi: float | None = None,
             hi_open: bool = False) -> float:
        """A float scalar rounded once to float32 (§9.3), in range."""
        return check_real(self.op, field, v, lo, hi, hi_open)

    def choice(self, field: str, v: Any, options: Sequence[str]) -> str:
        """One of the given names."""
        if not isinstance(v, str) or v not in options:
            self.fail(field, " or ".join(f'"{o}"' for o in options), show_value(v, repr))
        return v

    def boolean(self, field: str, v: Any) -> bool:
        """A Python bool."""
        if not isinstance(v, (bool, np.bool_)):
            self.fail(field, "a bool", show_value(v, repr))
        return bool(v)

    def axis(self, field: str, v: Any, rank: int) -> int:
        """An int axis in ``-rank..rank-1``, normalized to ``0..rank-1``."""
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) \
                or not -rank <= int(v) < rank:
            self.fail(field, f"an int in {-rank}..{rank - 1} (an axis of rank {rank})",
                      show_value(v, repr))
        return int(v) % rank

    def integer_or_none(self, field: str, v: Any) -> int | None:
        """An int (int64's range) or None."""
        if v is None:
            return None
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            self.fail(field, "an integer or None", show_value(v, repr))
        if not -2 ** 63 <= int(v) < 2 ** 63:
            self.fail(field, "an integer in int64's range", int(v))
        return int(v)
