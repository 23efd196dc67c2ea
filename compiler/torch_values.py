"""What the converters of ``gradc.from_torch`` ask (``gradc.torch_ops.Context``): the gradc
value of an fx node, sizes, dtypes, PyTorch's type promotion, a value of a given shape, and the
dropout state; and the parameters and constants those values come from.

``TorchValues`` holds the state of one translation that values live in; ``TorchTranslator``
(``torch_translate.py``) derives from it and walks the program.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as B
from gradc.ir.core import Graph, Parameter, Value
from gradc.ir.types import Dim, DType, element_count
from gradc.torch_ops import TorchNode, number

LIKE_LIMIT = 4096  # elements of a constant that only gives ``expand`` its shape
RNG_INPUT, RNG_OUTPUT = "rng_state", "rng_state_out"

DTYPES = {f"torch.{d.value}": d for d in DType}


class TorchValues:
    """The values of one translation, and the converters' ``Context``."""

    def __init__(self, torch: Any, name: str, symbols: dict[str, str]) -> None:
        self.torch = torch
        self.graph = Graph(name or "main")
        self.symbols = symbols  # torch's symbol -> the gradc symbol (a Dim's name)
        self.env: dict[Any, Any] = {}  # fx node -> Value, or a tuple of Value | None
        self.consts: dict[Any, Any] = {}  # fx node -> torch tensor (or tuple) known at import
        self.scalars: dict[Any, Any] = {}  # fx node -> Python or symbolic scalar
        self.tensors: dict[Any, tuple[str, Any]] = {}  # placeholder -> (parameter name, tensor)
        self.params: dict[str, Parameter] = {}
        self.const_values: dict[Any, Value] = {}
        self.shape_sources: dict[tuple, Value] = {}
        self.reserved: set[str] = set()  # names kept for outputs and parameters
        self.named: set[int] = set()  # ids of values named after their fx node
        self.rng: Value | None = None
        self.rng_input: Value | None = None

    # -- the Context protocol of the converters ---------------------------------------------
    def value(self, arg: Any, field: str) -> Value:
        """The gradc value of a tensor argument."""
        if is_node(arg):
            if arg in self.env:
                v = self.env[arg]
                if isinstance(v, tuple):
                    raise VerifyError(f"argument {field}: expected one tensor, got the results "
                                      f"of {arg.name!r}")
                return v
            if arg in self.tensors:
                return self._parameter(arg)
            if arg in self.consts:
                return self._constant(arg, field)
        raise VerifyError(f"argument {field}: expected a tensor, got {arg!r}")

    def operand(self, arg: Any, dtype: DType, field: str) -> Value:
        """A tensor or Python number as a value of ``dtype`` (cast or made a constant)."""
        arg = self._number(arg, field)
        if isinstance(arg, (bool, int, float)):
            return B.constant(number(arg, dtype, field))
        v = self.value(arg, field)
        return v if v.type.dtype == dtype else B.cast(v, dtype)

    def dim(self, arg: Any, field: str) -> Dim:
        """A size argument (an int, a SymInt or the node computing it) as a gradc dim."""
        if isinstance(arg, bool):
            raise VerifyError(f"argument {field}: expected a size, got {arg!r}")
        if isinstance(arg, int):
            return arg
        val = self.scalars.get(arg, arg.meta.get("val")) if hasattr(arg, "meta") else arg
        return self.size(val, field)

    def size(self, s: Any, field: str) -> Dim:
        """An int or SymInt as a gradc dim: an int or the name of a symbol."""
        if isinstance(s, int):
            return s
        expr = getattr(getattr(s, "node", None), "expr", None)
        if expr is None:
            raise VerifyError(f"{field}: expected a size, got {s!r}")
        if expr.is_Integer:
            return int(expr)
        if expr.is_Symbol:
            return self.symbols.get(str(expr), str(expr))
        raise UnsupportedError(f"{field}: the size {expr} is computed from symbolic sizes "
                               "(gradc keeps every symbolic size whole)")

    def shape(self, n: TorchNode, k: int = 0) -> tuple[Dim, ...]:
        """The shape of result ``k`` of a node, from the exporter's metadata."""
        val = n.meta[k] if isinstance(n.meta, (tuple, list)) else n.meta
        return tuple(self.size(s, f"result {k}") for s in val.shape)

    def dtype(self, n: TorchNode, k: int = 0) -> DType:
        """The dtype of result ``k`` of a node, from the exporter's metadata."""
        val = n.meta[k] if isinstance(n.meta, (tuple, list)) else n.meta
        return self._dtype(val.dtype)

    def common_dtype(self, a: Any, b: Any) -> DType:
        """PyTorch's type promotion (``torch.result_type``) of two tensors or numbers."""
        torch = self.torch
        stand_ins = []
        for arg in (a, b):
            arg = self._number(arg, "operand")
            val = self.consts.get(arg, arg.meta.get("val")) if is_node(arg) else arg
            if hasattr(val, "dtype"):  # a tensor: its dtype, and whether it has dims
                val = torch.empty(() if val.dim() == 0 else (1,), dtype=val.dtype)
            elif not isinstance(val, (bool, int, float)):
                raise VerifyError(f"expected a tensor or a number, got {arg!r}")
            stand_ins.append(val)
        if not any(isinstance(v, torch.Tensor) for v in stand_ins):
            raise VerifyError("expected a tensor among the operands, got numbers only")
        return self._dtype(torch.result_type(*stand_ins))

    def like(self, dims: Sequence[Dim], what: str) -> Value:
        """A value of exactly these dims for ``expand``: a value of that shape, else a small
        constant (at most ``LIKE_LIMIT`` elements, or one element padded at run time)."""
        source = self.shape_sources.get(tuple(dims))
        if source is not None:
            return source
        if any(isinstance(d, str) for d in dims):
            return self._symbolic_like(tuple(dims), what)
        static = [int(d) for d in dims]
        if element_count(static) <= LIKE_LIMIT:
            return B.constant(np.zeros(static, np.uint8))
        one = B.constant(np.zeros([1] * len(static), np.uint8))
        return B.pad(one, [0] * len(static), [d - 1 for d in static])

    def _symbolic_like(self, dims: tuple[Dim, ...], what: str) -> Value:
        """A value of ``dims`` made from one that has the same symbolic sizes in the same order
        (``x.new_zeros(x.size(0), 5)`` before anything of shape ``(N, 5)`` exists): its first
        element along every static axis, as uint8, padded to the static sizes."""
        symbols = [d for d in dims if isinstance(d, str)]
        for shape, v in self.shape_sources.items():
            if [d for d in shape if isinstance(d, str)] != symbols or v.type.dtype == DType.bool:
                continue
            keep = [d if isinstance(d, str) else 1 for d in shape]
            corner = B.slice(v, [0] * len(shape), keep, [1] * len(shape), keep)
            ones = [d if isinstance(d, str) else 1 for d in dims]
            small = B.cast(B.reshape(corner, ones), DType.uint8)
            grow = [0 if isinstance(d, str) else int(d) - 1 for d in dims]
            out = B.pad(small, [0] * len(dims), grow) if any(grow) else small
            self.shape_sources[dims] = out
            return out
        raise UnsupportedError(f"{what}: the shape {dims} has a symbolic size and no value of "
                               "the graph has its symbolic sizes")

    def rng_state(self) -> Value:
        """The dropout state to draw from next: the input ``rng_state`` at first."""
        if self.rng is None:
            if self.graph.uses_name(RNG_INPUT):
                raise UnsupportedError(f"training-mode dropout adds the input {RNG_INPUT!r}, a "
                                       "name the forward already uses")
            self.rng = self.rng_input = self.graph.input(RNG_INPUT, DType.uint32, (6,))
        return self.rng

    def set_rng_state(self, state: Value) -> None:
        """The state the next dropout draws from."""
        self.rng = state

    def _number(self, arg: Any, field: str) -> Any:
        """A scalar node (arithmetic of sizes) as its number; others as they are."""
        if not (is_node(arg) and arg in self.scalars):
            return arg
        val = self.scalars[arg]
        if isinstance(val, (bool, int, float)):
            return val
        raise UnsupportedError(f"argument {field}: the number {arg.name!r} ({val}) is computed "
                               "when the program runs (a symbolic size, or .item() of a "
                               "tensor); gradc takes numbers known at import here")

    # -- values -----------------------------------------------------------------------------
    def _parameter(self, node: Any) -> Parameter:
        name, t = self.tensors[node]
        if name not in self.params:
            array = self._array(t, f"parameter {name!r}")
            self.params[name] = self.graph.add_parameter(name, array)
        return self.params[name]

    def _constant(self, node: Any, field: str) -> Value:
        if node not in self.const_values:
            t = self.consts[node]
            if not hasattr(t, "dtype"):
                raise VerifyError(f"argument {field}: expected a tensor, got {t!r}")
            v = B.constant(self._array(t, f"constant {node.name!r}"))
            if not self.graph.uses_name(node.name) and node.name not in self.reserved:
                self.graph.rename(v, node.name)
                self.named.add(id(v))  # kept: the translator renames other new values
            self.const_values[node] = v
        return self.const_values[node]

    def _array(self, t: Any, what: str) -> np.ndarray:
        self._dtype(t.dtype, what)
        if t.numel() == 0:
            raise UnsupportedError(f"{what} is empty (shape {tuple(t.shape)}); gradc has no "
                                   "empty tensors")
        return np.array(t.detach().cpu().contiguous().numpy(), order="C", copy=True)

    def _dtype(self, dtype: Any, what: str = "dtype") -> DType:
        d = DTYPES.get(str(dtype))
        if d is None:
            raise UnsupportedError(f"{what}: {str(dtype).replace('torch.', '')} is not a gradc "
                                   "dtype")
        return d


def is_node(a: Any) -> bool:
    """True for an fx node (an argument computed by the graph)."""
    return hasattr(a, "op") and hasattr(a, "target") and hasattr(a, "meta")


__all__ = ["TorchValues", "is_node", "DTYPES", "RNG_INPUT", "RNG_OUTPUT", "LIKE_LIMIT"]
