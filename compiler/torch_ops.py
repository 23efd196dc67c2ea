"""The ATen table of ``gradc.from_torch``: one converter per ATen operator, and what they read.

A converter turns one node of a ``torch.export`` program (core ATen, after the decompositions
chosen in ``gradc.torch_frontend``) into gradc values, as the ONNX importer's converters turn
one ONNX node. It is registered under the ATen names it takes, without the ``aten.`` namespace
(``@aten("convolution.default")``), reads its arguments by their schema names
(``n.arg("stride")``) and asks the ``Context`` (``gradc.torch_values.TorchValues``) for gradc
values, sizes, dtypes and type promotion. Converters never import torch: the translator hands
them plain Python values and does what needs torch (evaluating constant subgraphs, promotion).

The converters live in ``torch_math.py`` (element-wise math, comparisons, reductions, tensors
made from sizes), ``torch_movement.py`` (views, permutations, slices, concatenation, padding),
``torch_nn.py`` (convolution, matrix products, batch normalization, softmax, dropout, losses),
``torch_pool.py`` (pooling, upsampling) and ``torch_transformer.py`` (embeddings and indexing,
layer normalization, scaled dot-product attention). The table holds only operators a decomposed
program can contain (``tests/test_from_torch_ops.py`` checks that each builds a graph). Two
further tables say what is not converted:

- ``PENDING``: ATen operators that need a gradc operator gradc does not have yet (empty since
  the transformer operators landed). ``from_torch`` refuses them with the operator they wait
  for; when it lands, its converter is one ``@aten`` function and the line here goes.
- ``SKIPPED``: nodes that compute no tensor (size queries and assertions the exporter leaves in
  the graph); their sizes are read from the exporter's metadata where used.

Anything else is refused as unsupported. Every refusal of a program is listed in one
``UnsupportedError`` (``gradc.torch_translate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir.core import Graph, Value
from gradc.ir.types import Dim, DType

Built = Value | None
"""What a converter gives for one result of the ATen op: a gradc value, or None when the result
is not built (no node reads it)."""


@dataclass(frozen=True)
class Converter:
    """How one ATen operator is translated."""

    build: Callable[["TorchNode", "Context"], Built | Sequence[Built]]


ATEN: dict[str, Converter] = {}

# ATen operator -> the gradc operator it needs (SPEC-transformers; being added on other branches).
PENDING: dict[str, str] = {}

SKIPPED = frozenset({
    "sym_size.int", "sym_numel.default", "sym_stride.int", "sym_storage_offset.default",
    "_assert_tensor_metadata.default", "_assert_scalar.default", "_assert_async.default",
    "_assert_async.msg", "sym_constrain_range.default", "sym_constrain_range_for_size.default",
    "_functional_assert_async.msg", "_functional_sym_constrain_range.default",
})


def aten(*names: str) -> Callable[[Callable], Callable]:
    """Decorator: register a converter for the given ATen operators (``"add.Tensor"``)."""
    def wrap(fn: Callable) -> Callable:
        for name in names:
            if name in ATEN:
                raise ValueError(f"ATen operator {name} is registered twice")
            ATEN[name] = Converter(fn)
        return fn
    return wrap


def aten_name(target: Any) -> str:
    """The table key of an fx node's target: ``convolution.default`` for ``aten.convolution
    .default``; other namespaces keep theirs (``prims.iota.default``), Python functions their
    qualified name (``operator.getitem``)."""
    text = str(target)
    if text.startswith("aten."):
        return text[len("aten."):]
    if callable(target) and not hasattr(target, "_schema"):
        module = getattr(target, "__module__", None) or ""
        name = getattr(target, "__name__", text)
        return f"{'operator' if module == '_operator' else module}.{name}"
    return text


_MISSING: Any = object()


class TorchNode:
    """One fx node of the exported program, its arguments by schema name, and where it is."""

    def __init__(self, fx: Any, where: str) -> None:
        self.fx = fx
        self.name: str = fx.name
        self.op = aten_name(fx.target)
        self.where = where
        schema = getattr(fx.target, "_schema", None)
        self._params = list(schema.arguments) if schema is not None else []

    @property
    def aten(self) -> str:
        """The operator's full name, as PyTorch prints it (``aten.convolution.default``)."""
        return f"aten.{self.op}" if str(self.fx.target).startswith("aten.") else self.op

    def arg(self, name: str, default: Any = _MISSING) -> Any:
        """An argument by its schema name: given positionally, by keyword, or the schema's
        default (else ``default``)."""
        for i, p in enumerate(self._params):
            if p.name == name:
                if i < len(self.fx.args):
                    return self.fx.args[i]
                if name in self.fx.kwargs:
                    return self.fx.kwargs[name]
                if p.has_default_value():
                    return p.default_value
                break
        else:
            if name in self.fx.kwargs:
                return self.fx.kwargs[name]
        if default is _MISSING:
            raise VerifyError(f"argument {name}: expected a value, got none")
        return default

    def used(self, k: int) -> bool:
        """True when something reads result ``k`` of a node with several results."""
        return any(u.op == "call_function" and aten_name(u.target) == "operator.getitem"
                   and u.args[1] == k for u in self.fx.users)

    @property
    def meta(self) -> Any:
        """The exporter's example of the result (a fake tensor, or a tuple of them)."""
        return self.fx.meta.get("val")


class Context(Protocol):
    """What converters need from the frontend."""

    graph: Graph

    def value(self, arg: Any, field: str) -> Value:
        """The gradc value of a tensor argument (VerifyError for anything else)."""

    def operand(self, arg: Any, dtype: DType, field: str) -> Value:
        """A tensor or Python number as a value of ``dtype`` (cast or made a constant)."""

    def dim(self, arg: Any, field: str) -> Dim:
        """A size (an int or a SymInt) as a gradc dim: an int or a symbol name."""

    def shape(self, n: TorchNode, k: int = 0) -> tuple[Dim, ...]:
        """The shape of result ``k`` of a node, from the exporter's metadata."""

    def dtype(self, n: TorchNode, k: int = 0) -> DType:
        """The dtype of result ``k`` of a node, from the exporter's metadata."""

    def common_dtype(self, a: Any, b: Any) -> DType:
        """PyTorch's type promotion of two tensor or number arguments."""

    def like(self, dims: Sequence[Dim], what: str) -> Value:
        """A value of exactly these dims, for ``expand`` (its elements are never read)."""

    def rng_state(self) -> Value:
        """The dropout state to draw from next (the graph input ``rng_state`` at first)."""

    def set_rng_state(self, state: Value) -> None:
        """The state the next dropout draws from."""


def ints(v: Any, field: str, length: int | None = None) -> list[int]:
    """An int or a list of ints (a single value is repeated to ``length``, as ATen does)."""
    if isinstance(v, bool) or v is None:
        raise VerifyError(f"argument {field}: expected ints, got {v!r}")
    items = [v] if isinstance(v, int) else list(v)
    if length is not None and len(items) == 1 and length > 1:
        items = items * length
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise UnsupportedError(f"argument {field}: expected static ints, got {items!r} (a "
                               "symbolic size is not supported here)")
    if length is not None and len(items) != length:
        raise VerifyError(f"argument {field}: expected {length} values, got {len(items)}")
    return items


def axis(d: Any, rank: int, field: str = "dim") -> int:
    """An axis in ``-rank..rank-1`` (a scalar's axis 0 or -1 too), made non-negative."""
    r = max(rank, 1)
    if isinstance(d, bool) or not isinstance(d, int) or not -r <= d < r:
        raise VerifyError(f"argument {field}: expected an axis in {-r}..{r - 1}, got {d!r}")
    return d % r


def axes(ds: Any, rank: int, field: str = "dim") -> list[int]:
    """A list of axes (None or empty: every axis), normalized and sorted."""
    if ds is None or (isinstance(ds, (list, tuple)) and not ds):
        return list(range(rank))
    items = [ds] if isinstance(ds, int) else list(ds)
    return sorted({axis(d, rank, field) for d in items})


def number(v: bool | int | float, dtype: DType, field: str) -> np.ndarray:
    """A Python number as a rank-0 array of ``dtype`` (integers must fit exactly)."""
    if dtype.is_float or dtype == DType.bool:
        with np.errstate(over="ignore"):
            return np.array(v, dtype=dtype.numpy)
    if isinstance(v, float) and not float(v).is_integer():
        raise UnsupportedError(f"argument {field}: {v!r} is not an integer ({dtype} operand)")
    info = np.iinfo(dtype.numpy)
    if not info.min <= int(v) <= info.max:
        raise UnsupportedError(f"argument {field}: {v!r} is outside {dtype}'s range")
    return np.array(int(v), dtype=dtype.numpy)


__all__ = ["ATEN", "PENDING", "SKIPPED", "Built", "Context", "Converter", "TorchNode", "aten",
           "aten_name", "axes", "axis", "ints", "number"]
