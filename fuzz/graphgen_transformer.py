"""Generators for the operators of SPEC-transformers.md §24-26 (a mixin of ``GraphGen``).

``gelu``/``gelu_grad`` (both approximations), ``erf``, ``sin``, ``cos``, ``is_nan``,
``mean_variance_normalization`` and its gradient (axes subsets, scale and bias that broadcast
from the right, either flag off, epsilon 0 or large), ``gather`` and ``gather_grad`` (any
``input`` dtype, indices of rank 0..2 as a graph input or a constant; a constant's indices are
in range mostly and out of range now and then, and a graph input's are chosen when the graph
runs: ``fuzz.tolerance.index_feeds``). Valid calls mostly; ``edge`` brings boundary attribute
values and wrong dtypes, which the builders must refuse with a ``GradcError``.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

import numpy as np

from gradc.ir.core import Value

FLOATS = ("float32", "float16", "float64")
ANY = FLOATS + ("int32", "int64", "int8", "uint8", "int16", "uint16", "uint32", "uint64", "bool")
APPROX_EDGES: tuple[Any, ...] = ("", "exact", "TANH", "erf", None, 1, True, "none ")


class TransformerOpsMixin:
    """Random calls of the §24-26 operators; see the module docstring."""

    rng: random.Random
    edge: float
    pool: list[Value]
    tensor: Callable[..., Value | None]
    value_of: Callable[..., Value | None]
    emit: Callable[..., None]
    ints: Callable[..., list[Any]]
    maybe_edge_int: Callable[..., Any]
    maybe_edge_float: Callable[..., Any]
    rec: Any

    def _approximation(self) -> dict[str, Any]:
        if self.rng.random() < self.edge:
            return {"approximation": self.rng.choice(APPROX_EDGES)}
        r = self.rng.random()
        return {} if r < 0.3 else {"approximation": "none" if r < 0.6 else "tanh"}

    def _float_or_edge(self) -> tuple[str, ...]:
        """Float dtypes, or now and then any dtype (the builders refuse the others)."""
        return ANY[:-1] if self.rng.random() < self.edge else FLOATS

    # -- §25 activations --------------------------------------------------------------------------
    def activations(self) -> None:
        op = self.rng.choice(("gelu", "gelu", "gelu_grad", "gelu_grad", "erf", "sin", "cos",
                              "is_nan"))
        x = self.tensor(self._float_or_edge(), 0, 5)
        if x is None:
            return
        if op == "gelu_grad":
            dy = self.value_of(x.type.dtype.value, x.type.shape)
            self.emit(op, [x, dy], self._approximation())
        elif op == "gelu":
            self.emit(op, [x], self._approximation())
        else:
            self.emit(op, [x], {})

    # -- §24 normalization ------------------------------------------------------------------------
    def _norm_axes(self, rank: int) -> Any:
        if self.rng.random() < 0.2:
            return None  # the default (-1,)
        k = self.rng.randint(1, rank)
        axes = sorted(self.rng.sample(range(rank), k)) if self.rng.random() < 0.5 else \
            list(range(rank - k, rank))  # layer norm's trailing axes mostly
        axes = [a - rank if self.rng.random() < 0.3 else a for a in axes]
        if self.rng.random() < self.edge:
            axes = self.rng.choice(([], axes + axes[:1], [rank], [-rank - 1]))
        return self.ints(axes)

    def _broadcast_param(self, shape: Sequence[Any]) -> list[Any]:
        """A shape that broadcasts to ``shape`` from the right (each dim equal or 1)."""
        k = self.rng.randint(1, len(shape))
        return [1 if self.rng.random() < 0.3 else d for d in shape[len(shape) - k:]]

    def _norm_attrs(self, rank: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {"axes": self._norm_axes(rank)}
        for flag in ("use_mean", "use_variance"):
            if self.rng.random() < 0.4:
                attrs[flag] = self.rng.random() < 0.6
                if self.rng.random() < self.edge:
                    attrs[flag] = self.rng.choice((1, 0, "yes", None, np.bool_(True)))
        if self.rng.random() < 0.5:
            attrs["epsilon"] = self.maybe_edge_float(self.rng.choice((1e-5, 1e-6, 0.0, 1e-3,
                                                                      1.0)))
        return attrs

    def normalization(self) -> None:
        x = self.tensor(self._float_or_edge(), 1, 4)
        if x is None:
            return
        dtype, shape = x.type.dtype.value, list(x.type.shape)
        attrs = self._norm_attrs(len(shape))
        scale = self.value_of(dtype, self._broadcast_param(shape))
        if self.rng.random() < 0.35:
            dy = self.value_of(dtype, shape)
            self.emit("mean_variance_normalization_grad", [x, dy, scale], attrs)
            return
        operands: list[Any] = [x]
        r = self.rng.random()
        if r < 0.6:
            operands.append(scale)
            if self.rng.random() < 0.6:
                operands.append(self.value_of(dtype, self._broadcast_param(shape)))
        elif r < 0.7:  # a bias without a scale: the scale is ones
            bias = self.value_of(dtype, self._broadcast_param(shape))
            if bias is not None:
                self.pool.extend(self.rec.op("mean_variance_normalization", [x, None, bias],
                                             attrs))
            return
        self.emit("mean_variance_normalization", operands, attrs)

    # -- §26 gather -------------------------------------------------------------------------------
    def _indices(self, size: Any) -> Value | None:
        """Indices for a dim of ``size``: a graph input (values chosen when the graph runs) or a
        constant, in ``[-size, size)`` mostly and out of range now and then."""
        dtype = self.rng.choice(("int64", "int64", "int32"))
        shape = [self.rng.randint(1, 4) for _ in range(self.rng.choice((0, 1, 1, 1, 2)))]
        if self.rng.random() < 0.2 and self.edge:
            dtype = self.rng.choice(("float32", "uint8", "int16", "bool", "uint64"))
        if self.rng.random() < 0.7 or dtype not in ("int64", "int32"):
            return self.value_of(dtype, shape)
        n = size if isinstance(size, int) else 1  # a symbol is bound to 1..3 when run
        nrng = np.random.default_rng(self.rng.getrandbits(32))
        arr = nrng.integers(-n, n, shape).astype(dtype)
        if self.rng.random() < 0.15:
            info = np.iinfo(dtype)
            bad = self.rng.choice((n, -n - 1, n + 5, info.max, info.min))
            # a huge dim's n is past int32: the nearest value the dtype holds (still bad)
            arr.reshape(-1)[self.rng.randrange(max(1, arr.size))] = min(max(bad, info.min),
                                                                        info.max)
        outs = self.rec.op("constant", [], {"value": arr})
        return outs[0] if outs else None

    def _gather_axis(self, rank: int) -> tuple[int, Any]:
        axis = self.rng.randrange(rank)
        given: Any = axis - rank if self.rng.random() < 0.3 else axis
        if self.rng.random() < self.edge:
            given = self.rng.choice((rank, -rank - 1, 2 ** 63, 1.0, True, None, "0"))
        return axis, given

    def gather(self) -> None:
        if self.rng.random() < 0.35:
            self.gather_grad()
            return
        x = self.tensor(ANY if self.rng.random() < 0.3 else FLOATS, 1, 4)
        if x is None:
            return
        axis, given = self._gather_axis(x.type.rank)
        attrs = {} if given == 0 and self.rng.random() < 0.3 else {"axis": given}
        self.emit("gather", [x, self._indices(x.type.shape[axis])], attrs)

    def gather_grad(self) -> None:
        dtype = self.rng.choice(self._float_or_edge())
        out = [self.rng.choice((1, 2, 3, 4, 5)) for _ in range(self.rng.randint(1, 3))]
        if self.rng.random() < 0.15:
            out[0] = getattr(self, "symbol", "N")
        axis, given = self._gather_axis(len(out))
        idx = self._indices(out[axis])
        if idx is None:
            return
        dy_shape = out[:axis] + list(idx.type.shape) + out[axis + 1:]
        dy = self.value_of(dtype, dy_shape)
        sizes = self.ints(out) if self.rng.random() < 0.2 else out
        self.emit("gather_grad", [dy, idx], {"output_sizes": sizes, "axis": given})


MAKERS: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("activations", 4, ("gelu", "gelu_grad", "erf", "sin", "cos", "is_nan")),
    ("normalization", 3, ("mean_variance_normalization", "mean_variance_normalization_grad")),
    ("gather", 3, ("gather", "gather_grad")),
)

__all__ = ["TransformerOpsMixin", "MAKERS"]
