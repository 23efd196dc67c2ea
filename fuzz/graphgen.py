"""Random gradc graphs built with the op builders (``gradc.ops``), recorded as replayable programs.

Every registered op is generated. Shapes are small mostly; sometimes a dim is symbolic, or huge
(2^24 .. 2^63-1); attribute values are valid mostly and sometimes replaced by boundary values
(0, -1, 2^31, 2^62, 2^63-1, 2^64, NaN, inf, -0.0, 5000-digit ints, ...). Names are sometimes
hostile (``self``, keywords, unicode, lone surrogates).

A graph is built through a ``Recorder``, which keeps the builder calls as a *program*::

    {"name": "g", "steps": [("input", "x", "float32", (2, 3)),
                            ("op", "relu", [0], {}), ("output", 1, "y")]}

(operands are indices into the values made so far, or ``("num", 1.5)`` for a Python number).
``replay(program)`` builds the same graph again; a builder that raises something other than a
``GradcError`` while generating ends the program there, so the program reproduces the crash.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

import numpy as np

from gradc import ops
from gradc.errors import GradcError
from gradc.ir.core import Graph, Value
from gradc.ir.types import DType, TensorType

from fuzz.graphgen_training import MAKERS, TrainingOpsMixin
from fuzz.graphgen_transformer import MAKERS as TRANSFORMER_MAKERS
from fuzz.graphgen_transformer import TransformerOpsMixin

INT_EDGES: tuple[int, ...] = (
    0, -1, 1, 2, 3, 2 ** 24, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 40, 2 ** 53 + 1, 2 ** 62,
    2 ** 63 - 1, 2 ** 63, 2 ** 64, -2 ** 31, -2 ** 63, -2 ** 63 - 1)
FLOAT_EDGES: tuple[float, ...] = (
    0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 1e-45, 1.1754943508222875e-38, 65504.0,
    65520.0, 3.4028234663852886e38, 3.5e38, 1.7976931348623157e308, 0.1, 1 / 3, 16777217.0,
    -1.5, 1e-300, 2.0 ** -149, 2.0 ** 63)
HUGE_DIMS: tuple[int, ...] = (2 ** 24, 2 ** 31, 2 ** 32, 2 ** 40, 2 ** 62, 2 ** 63 - 1)
WIDE_INT = 10 ** 5000 - 1  # 5000 digits: str() of it fails under the 4300-digit limit
HOSTILE_NAMES: tuple[str, ...] = (
    "self", "arrays", "kwargs", "args", "class", "lambda", "None", "True", "__init__",
    "__class__", "def", "return", "graph", "array", "hex", "f32", "inf", "nan", "true", "x y",
    "0", "007", "a.b", "a-b", "ünï", "日本", "\ud800", "\udfff", 'a"b', "a\\b", "\n", "%", " ",
    "x" * 300, "int", "float", "np", "numpy", "out", "input", "grad_x", "main", "__builtins__",
    "\x00", "\u200b", "𝔁", "ﬁ", "in0", "N")
SYMBOLS: tuple[str, ...] = ("N", "M", "batch", "B", "self", "N.1", "ünï", "\ud800", "1N", "f32",
                            "x y", "inf")
DTYPES: tuple[str, ...] = ("float32",) * 6 + ("float16", "float16", "float64", "float64", "int32",
                                             "int64", "int8", "uint8", "uint64", "int16",
                                             "uint32", "uint16", "bool")
FLOATS = ("float32", "float16", "float64")


class BuildCrash(Exception):
    """A builder raised something other than a GradcError while generating."""

    program: dict[str, Any] = {}


def _dtype_name(v: Value) -> str:
    return v.type.dtype.value


class Recorder:
    """Builds a graph through the public builders and records each call as a program step."""

    def __init__(self, name: str) -> None:
        self.program: dict[str, Any] = {"name": name, "steps": []}
        self.values: list[Value] = []
        self.index: dict[int, int] = {}
        try:
            self.graph = Graph(name)
        except GradcError:  # a refused graph name: the parser and the importer test those
            self.graph = Graph("g")
            self.program["name"] = "g"

    def _run(self, step: tuple[Any, ...], strict: bool) -> Any:
        before = len(self.values)
        try:
            out = apply_step(self.graph, self.values, step)
        except GradcError:
            if strict:
                raise
            return None
        except Exception as e:
            self.program["steps"].append(step)
            crash = BuildCrash(f"{step[0]} {step[1]!r}: {type(e).__name__}: {e}")
            crash.program = self.program
            raise crash from e
        self.program["steps"].append(step)
        for i in range(before, len(self.values)):
            self.index[id(self.values[i])] = i
        return out

    def input(self, name: str, dtype: str, shape: Sequence[Any]) -> Value | None:
        """A graph input (None when the builder refuses it)."""
        return self._run(("input", name, dtype, tuple(shape)), False)

    def op(self, op: str, operands: Sequence[Any], attrs: dict[str, Any]) -> tuple[Value, ...]:
        """Apply one builder; operands are values or numbers. () when refused."""
        refs = [self._ref(v) for v in operands]
        out = self._run(("op", op, refs, dict(attrs)), False)
        return () if out is None else out

    def _ref(self, v: Any) -> Any:
        """A value's index; a list of values as ("list", indices); a number as ("num", v)."""
        if isinstance(v, Value):
            return self.index[id(v)]
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, Value) for x in v):
            return ("list", [self.index[id(x)] for x in v])
        return ("num", v)

    def output(self, v: Value, name: str | None) -> None:
        """Mark an output (skipped when refused)."""
        self._run(("output", self.index[id(v)], name), False)


def apply_step(g: Graph, values: list[Value], step: tuple[Any, ...] | list[Any]) -> Any:
    """Run one program step on a graph; new values are appended to ``values``."""
    kind = step[0]
    if kind == "input":
        v = g.input(step[1], step[2], tuple(step[3]))
        values.append(v)
        return v
    if kind == "op":
        _, op, refs, attrs = step
        operands = [values[r] if not isinstance(r, (tuple, list)) else
                    [values[i] for i in r[1]] if r[0] == "list" else r[1] for r in refs]
        if op == "constant":
            out = ops.constant(attrs["value"], graph=g)
        else:
            with g:
                out = getattr(ops, op)(*operands, **attrs)
        outs = tuple(v for v in (out if isinstance(out, tuple) else (out,)) if v is not None)
        values.extend(outs)  # (sgd without momentum returns no buffer: None)
        return outs
    if kind == "output":
        return g.output(values[step[1]], step[2])
    raise ValueError(f"unknown program step {kind!r}")


def replay(program: dict[str, Any]) -> Graph:
    """The graph of a program (raises whatever the builders raise)."""
    g = Graph(program["name"])
    values: list[Value] = []
    for step in program["steps"]:
        apply_step(g, values, step)
    return g


# -- the generator ---------------------------------------------------------------------------------
class GraphGen(TrainingOpsMixin, TransformerOpsMixin):
    """Grows one random graph; ``edge`` is the chance that an attribute gets a boundary value."""

    def __init__(self, rng: random.Random, edge: float = 0.08, huge: float = 0.04,
                 symbolic: float = 0.2, hostile: float = 0.05) -> None:
        self.rng = rng
        self.edge = edge
        self.huge = huge
        self.symbolic = symbolic
        self.hostile = hostile
        self.dtype = rng.choice(DTYPES[:-1])
        name = self.name() if rng.random() < 0.1 else "g"
        self.rec = Recorder(name if name.strip("\x00") else "g")
        self.pool: list[Value] = []
        self.n_names = 0
        self.symbol = rng.choice(SYMBOLS) if rng.random() < 0.3 else "N"

    # -- names, types, values ----------------------------------------------------------------
    def name(self) -> str:
        """A value name: plain, or now and then a hostile one."""
        self.n_names = getattr(self, "n_names", 0) + 1
        if self.rng.random() < self.hostile:
            return self.rng.choice(HOSTILE_NAMES)
        return f"v{self.n_names}"

    def dim(self) -> Any:
        """One dim: small mostly, sometimes a symbol or huge."""
        r = self.rng.random()
        if r < self.huge:
            return self.rng.choice(HUGE_DIMS)
        if r < self.huge + self.symbolic * 0.3:
            return self.symbol
        return self.rng.choice((1, 1, 2, 2, 3, 3, 4, 5))

    def shape(self, lo: int = 1, hi: int = 5) -> tuple[Any, ...]:
        """A random shape of rank lo..hi."""
        rank = self.rng.randint(lo, hi)
        return tuple(self.dim() for _ in range(rank))

    def fresh(self, dtype: str, shape: Sequence[Any]) -> Value | None:
        """A new graph input of this type (None if no name was accepted)."""
        for _ in range(3):
            v = self.rec.input(self.name(), dtype, shape)
            if v is not None:
                self.pool.append(v)
                return v
        return None

    def value_of(self, dtype: str, shape: Sequence[Any]) -> Value | None:
        """A value of exactly this type: one of the pool's (often) or a new input."""
        try:
            t = TensorType(DType.of(dtype), tuple(shape))
        except GradcError:
            return self.fresh(dtype, shape)  # refused again there, through the recorder
        same = [v for v in self.pool if v.type == t]
        if same and self.rng.random() < 0.7:
            return self.rng.choice(same)
        return self.fresh(dtype, shape)

    def pick(self, pred: Callable[[Value], bool], make: Callable[[], Value | None]
             ) -> Value | None:
        """A pool value that satisfies ``pred`` (often), else ``make()``."""
        ok = [v for v in self.pool if pred(v)]
        if ok and self.rng.random() < 0.8:
            return ok[-1] if self.rng.random() < 0.4 else self.rng.choice(ok)
        return make()

    def tensor(self, dtypes: Sequence[str], lo: int, hi: int,
               static_from: int | None = None) -> Value | None:
        """An operand with a dtype in ``dtypes`` and rank lo..hi (static dims from an axis on)."""
        def pred(v: Value) -> bool:
            if _dtype_name(v) not in dtypes or not lo <= v.type.rank <= hi:
                return False
            return static_from is None or all(isinstance(d, int) for d in
                                              v.type.shape[static_from:])

        def make() -> Value | None:
            dtype = self.dtype if self.dtype in dtypes else self.rng.choice(list(dtypes))
            shape = list(self.shape(lo, hi))
            if static_from is not None:
                for i in range(static_from, len(shape)):
                    if isinstance(shape[i], str):
                        shape[i] = self.rng.randint(1, 5)
            return self.fresh(dtype, shape)

        return self.pick(pred, make)

    # -- attribute values ---------------------------------------------------------------------
    def maybe_edge_int(self, v: int) -> Any:
        """``v``, or now and then a boundary integer (or a 5000-digit one)."""
        if self.rng.random() >= self.edge:
            return v
        r = self.rng.random()
        if r < 0.05:
            return WIDE_INT
        if r < 0.1:
            return self.rng.choice((1.5, True, "2", None))
        return self.rng.choice(INT_EDGES)

    def maybe_edge_float(self, v: float) -> Any:
        """``v``, or now and then a boundary float."""
        if self.rng.random() >= self.edge:
            return v
        r = self.rng.random()
        if r < 0.05:
            return self.rng.choice((WIDE_INT, -WIDE_INT, 10 ** 400))
        if r < 0.15:
            return self.rng.choice(INT_EDGES)
        return self.rng.choice(FLOAT_EDGES)

    def ints(self, vals: Sequence[Any]) -> list[Any]:
        """A list of ints with edge values now and then (and now and then a wrong length)."""
        out = [self.maybe_edge_int(v) for v in vals]
        if self.rng.random() < self.edge / 4:
            out = out[:-1] if out and self.rng.random() < 0.5 else out + [1]
        return out

    # -- ops ----------------------------------------------------------------------------------
    def step(self) -> None:
        """Add one op (or a few) to the graph."""
        makers: list[tuple[Callable[[], None], int]] = [
            (self.unary, 6), (self.binary, 6), (self.clip, 4), (self.grad_pair, 4),
            (self.cast, 2), (self.reshape, 3), (self.reduce_sum, 3), (self.expand, 2),
            (self.slice, 4), (self.slice_grad, 4), (self.max_pooling, 4),
            (self.max_pooling_grad, 4), (self.resample, 4), (self.resample_grad, 4),
            (self.constant, 3),
        ]
        makers += [(getattr(self, m), w) for m, w, needs in MAKERS + TRANSFORMER_MAKERS
                   if all(hasattr(ops, op) for op in needs)]
        fns, weights = zip(*makers)
        self.rng.choices(fns, weights)[0]()

    def emit(self, op: str, operands: Sequence[Any], attrs: dict[str, Any]) -> None:
        """Apply a builder and keep the results in the pool."""
        if any(x is None or (isinstance(x, list) and None in x) for x in operands):
            return
        self.pool.extend(self.rec.op(op, operands, attrs))

    def unary(self) -> None:
        op = self.rng.choice(("relu", "neg", "identity", "relu", "neg"))
        dtypes = ("float32", "float16", "float64", "int32", "int16", "int8") if op == "relu" \
            else DTYPES[:-1]
        self.emit(op, [self.tensor(dtypes, 0 if op != "relu" else 1, 5)], {})

    def binary(self) -> None:
        op = self.rng.choice(("add", "sub", "mul"))
        a = self.tensor(DTYPES[:-1], 0, 5)
        if a is None:
            return
        r = self.rng.random()
        if r < 0.15:
            num = self.rng.choice((0.0, 1.0, 0.5, -2.0, 3)) if a.type.dtype.is_float \
                else self.rng.choice((0, 1, 3, -1))
            self.emit(op, [a, self.maybe_edge_float(num) if a.type.dtype.is_float else num], {})
            return
        shape = list(a.type.shape)
        if r < 0.5 and shape:
            k = self.rng.randint(0, len(shape))
            shape = shape[k:]
            shape = [1 if self.rng.random() < 0.3 else d for d in shape]
        b = self.value_of(_dtype_name(a), shape)
        pair = [a, b] if self.rng.random() < 0.5 else [b, a]
        self.emit(op, pair, {})

    def clip(self) -> None:
        grad = self.rng.random() < 0.5
        dtypes = DTYPES[:-1]
        x = self.tensor(dtypes, 1, 5)
        if x is None:
            return
        if x.type.dtype.is_float:
            lo, hi = self.rng.choice(((0.0, 6.0), (-1.0, 1.0), (0.5, 0.25), (-math.inf, 2.0)))
            lo, hi = self.maybe_edge_float(lo), self.maybe_edge_float(hi)
        else:
            lo, hi = self.rng.choice(((0, 6), (-1, 1), (3, 2)))
            lo, hi = self.maybe_edge_int(lo), self.maybe_edge_int(hi)
        if grad:
            if not x.type.dtype.is_float and self.rng.random() < 0.7:
                return
            dy = self.value_of(_dtype_name(x), x.type.shape)
            self.emit("clip_grad", [x, dy], {"min": lo, "max": hi})
        else:
            self.emit("clip", [x], {"min": lo, "max": hi})

    def grad_pair(self) -> None:
        x = self.tensor(("float32", "float16", "float64", "int32", "int8"), 1, 5)
        if x is None:
            return
        self.emit("relu_grad", [x, self.value_of(_dtype_name(x), x.type.shape)], {})

    def cast(self) -> None:
        x = self.tensor(DTYPES, 0, 5)
        to: Any = self.rng.choice(DTYPES)
        if self.rng.random() < self.edge:
            to = self.rng.choice(("f8", "float128", "complex64", "object", "", "F32", 5))
        self.emit("cast", [x], {"dtype": to})

    def reshape(self) -> None:
        x = self.tensor(DTYPES, 0, 5)
        if x is None:
            return
        syms = [d for d in x.type.shape if isinstance(d, str)]
        static = [d for d in x.type.shape if isinstance(d, int)]
        n = math.prod(static)
        dims: list[Any] = []
        while n > 1 and len(dims) < 6:
            f = _small_factor(n, self.rng)
            dims.append(f)
            n //= f
        if n > 1:
            dims.append(n)
        dims += syms
        self.rng.shuffle(dims)
        if self.rng.random() < 0.2:
            dims.insert(self.rng.randint(0, len(dims)), 1)
        if dims and self.rng.random() < 0.3:
            i = self.rng.randrange(len(dims))
            if isinstance(dims[i], int):
                dims[i] = -1
        if self.rng.random() < self.edge:  # products that wrap around in int64
            dims = [2 ** 32, 2 ** 32, -1] if self.rng.random() < 0.5 else \
                [self.rng.choice(HUGE_DIMS), -1] + syms
        self.emit("reshape", [x], {"shape": self.ints(dims) if self.rng.random() < 0.3 else dims})

    def reduce_sum(self) -> None:
        x = self.tensor(DTYPES[:-1], 0, 5)
        if x is None:
            return
        rank = x.type.rank
        axes: Any = None
        if rank and self.rng.random() < 0.7:
            axes = sorted(self.rng.sample(range(rank), self.rng.randint(1, rank)))
            axes = [a - rank if self.rng.random() < 0.2 else a for a in axes]
            axes = self.ints(axes)
        self.emit("reduce_sum", [x], {"axes": axes, "keepdims": self.rng.random() < 0.5})

    def expand(self) -> None:
        x = self.tensor(DTYPES, 0, 4)
        if x is None:
            return
        like: list[Any] = [self.rng.randint(1, 3) for _ in range(self.rng.randint(0, 2))]
        like += [self.rng.randint(1, 4) if d == 1 else d for d in x.type.shape]
        dtype = self.rng.choice(DTYPES) if self.rng.random() < 0.3 else _dtype_name(x)
        self.emit("expand", [x, self.value_of(dtype, like)], {})

    def _window(self, full: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        off: list[Any] = []
        size: list[Any] = []
        stride: list[Any] = []
        count: list[Any] = []
        for n in full:
            if isinstance(n, str):
                off.append(0)
                size.append(n)
                st = self.rng.choice((1, -1))
                stride.append(st)
                count.append(n)
                continue
            small = min(n, 6)
            s = self.rng.randint(1, small)
            o = self.rng.randint(0, min(n - s, 4))
            st = self.rng.choice((1, 1, 2, -1, -2, 3))
            off.append(o)
            size.append(s)
            stride.append(st)
            count.append(1 + (s - 1) // abs(st))
        return off, size, stride, count

    def slice(self) -> None:
        x = self.tensor(("float32", "float16", "float64", "int32", "int64", "uint8"), 1, 5)
        if x is None:
            return
        off, size, stride, count = self._window(x.type.shape)
        if stride and self.rng.random() < 0.1:
            i = self.rng.randrange(len(stride))
            if isinstance(size[i], int):
                stride[i] = 0
                count[i] = self.rng.randint(1, 3)
        attrs: dict[str, Any] = {"input_window_offsets": self.ints(off),
                                 "input_window_sizes": size,
                                 "input_window_strides": self.ints(stride)}
        if self.rng.random() < 0.4:
            attrs["output_sizes"] = [c if isinstance(c, str) else self.rng.randint(1, c)
                                     for c in count]
        self.emit("slice", [x], attrs)

    def slice_grad(self) -> None:
        dtype = self.rng.choice(FLOATS) if self.rng.random() < 0.8 else self.rng.choice(DTYPES[:-1])
        full = [d for d in self.shape(1, 4)]
        off, size, stride, count = self._window(full)
        dy_shape = [c if isinstance(c, str) else self.rng.randint(1, c) for c in count]
        dy = self.value_of(dtype, dy_shape)
        self.emit("slice_grad", [dy], {"output_sizes": self.ints(full) if self.rng.random() < 0.2
                                       else full,
                                       "input_window_offsets": self.ints(off),
                                       "input_window_sizes": size,
                                       "input_window_strides": self.ints(stride)})

    def _pool_attrs(self, spatial: Sequence[Any]) -> dict[str, Any]:
        nd = len(spatial)
        w = [self.rng.randint(1, min(n, 3) + 1) for n in spatial]
        attrs: dict[str, Any] = {"window_size": self.ints(w)}
        if self.rng.random() < 0.7:
            attrs["strides"] = self.ints([self.rng.randint(1, 3) for _ in range(nd)])
        if self.rng.random() < 0.5:
            attrs["start_padding"] = self.ints([self.rng.randint(0, k - 1) for k in w])
            attrs["end_padding"] = self.ints([self.rng.randint(0, k - 1) for k in w])
        if self.rng.random() < 0.3:
            attrs["dilations"] = self.ints([self.rng.randint(1, 2) for _ in range(nd)])
        if self.rng.random() < self.edge:  # windows, strides and pads of 2^24 .. 2^62
            k = self.rng.choice(("window_size", "strides", "start_padding", "end_padding",
                                 "dilations"))
            attrs[k] = [self.rng.choice((2 ** 24, 2 ** 31, 2 ** 32, 2 ** 40, 2 ** 62))
                        for _ in range(nd)]
        return attrs

    def max_pooling(self) -> None:
        x = self.tensor(("float32", "float16", "float64", "int8", "uint8", "int32"), 4, 5,
                        static_from=2)
        if x is None:
            return
        attrs = self._pool_attrs(x.type.shape[2:])
        if self.rng.random() < 0.3:
            attrs["output_indices"] = True
        self.emit("max_pooling", [x], attrs)

    def max_pooling_grad(self) -> None:
        x = self.tensor(FLOATS, 4, 5, static_from=2)
        if x is None:
            return
        attrs = self._pool_attrs(x.type.shape[2:])
        y = self.rec.op("max_pooling", [x], attrs)  # its result type is dy's
        if not y:
            return
        self.pool.append(y[0])
        dy = self.value_of(_dtype_name(x), y[0].type.shape)
        self.emit("max_pooling_grad", [x, dy], attrs)

    def _resample_attrs(self, rank: int) -> dict[str, Any]:
        scales = [self.maybe_edge_float(self.rng.choice((1.0, 2.0, 0.5, 3.0, 1.5, 0.75)))
                  for _ in range(rank)]
        attrs: dict[str, Any] = {"scales": scales}
        if self.rng.random() < 0.6:
            attrs["interpolation_mode"] = self.rng.choice(("nearest", "linear"))
        if self.rng.random() < 0.3:
            attrs["rounding_direction"] = self.rng.choice(("decreasing", "increasing"))
        if self.rng.random() < 0.3:
            attrs["input_pixel_offsets"] = [self.maybe_edge_float(self.rng.choice((0.5, 0.0)))
                                            for _ in range(rank)]
            attrs["output_pixel_offsets"] = [self.maybe_edge_float(
                self.rng.choice((-0.5, 0.0, 0.25))) for _ in range(rank)]
        return attrs

    def resample(self) -> None:
        x = self.tensor(("float32", "float16", "float64", "int8", "uint8"), 1, 4)
        if x is None:
            return
        attrs = self._resample_attrs(x.type.rank)
        for i, d in enumerate(x.type.shape):
            if isinstance(d, str):
                attrs["scales"][i] = 1.0
        if self.rng.random() < 0.2:
            attrs["output_sizes"] = self.ints([d if isinstance(d, str) else self.rng.randint(1, 6)
                                               for d in x.type.shape])
        self.emit("resample", [x], attrs)

    def resample_grad(self) -> None:
        dtype = self.rng.choice(FLOATS)
        out = [self.rng.randint(1, 5) for _ in range(self.rng.randint(1, 4))]
        attrs = self._resample_attrs(len(out))
        x = self.value_of(dtype, out)
        y = self.rec.op("resample", [x], attrs) if x is not None else ()
        if not y:  # the forward op gives dy's type
            return
        self.pool.append(y[0])
        dy = self.value_of(dtype, y[0].type.shape)
        attrs["output_sizes"] = self.ints(out) if self.rng.random() < 0.2 else out
        self.emit("resample_grad", [dy], attrs)

    def constant(self) -> None:
        dtype = self.rng.choice(DTYPES)
        shape = tuple(self.rng.randint(1, 4) for _ in range(self.rng.randint(0, 3)))
        if self.rng.random() < 0.1:
            shape = (self.rng.choice((257, 300)),)
        self.emit("constant", [], {"value": random_array(self.rng, shape, dtype)})

    # -- whole graphs --------------------------------------------------------------------------
    def outputs(self) -> None:
        """Mark the last value and a few others as outputs."""
        made = [v for v in self.pool if v.producer is not None]
        chosen = [made[-1]] if made else self.pool[:1]
        extra = [v for v in made[:-1] if self.rng.random() < 0.2][:3]
        for i, v in enumerate(chosen + extra):
            name = self.name() if self.rng.random() < 0.5 else f"out{i}"
            self.rec.output(v, name)

    def chain(self, n: int) -> None:
        """A chain of ``n`` unary ops (deep graphs: recursion limits)."""
        x = self.fresh("float32", (2, 3))
        for _ in range(n):
            if x is None:
                return
            outs = self.rec.op(self.rng.choice(("relu", "neg", "relu")), [x], {})
            x = outs[0] if outs else None
            if x is not None:
                self.pool.append(x)


def _small_factor(n: int, rng: random.Random) -> int:
    fs = [f for f in (2, 3, 5, 7) if n % f == 0]
    return rng.choice(fs) if fs else n


def random_array(rng: random.Random, shape: Sequence[int], dtype: str) -> np.ndarray:
    """Small values with special ones now and then (+-0, +-inf, NaN with payloads, extremes)."""
    nrng = np.random.default_rng(rng.getrandbits(32))
    dt = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "b":
        return nrng.integers(0, 2, size).astype(dt).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        a = nrng.integers(max(info.min, -5), min(info.max, 5) + 1, size).astype(dt)
        pick = nrng.random(size) < 0.1
        a[pick] = nrng.choice(np.array([info.min, info.max, 0], dt), int(pick.sum()))
        return a.reshape(shape)
    a = (nrng.integers(-8, 9, size) / 4.0).astype(dt)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(dt).max,
                        np.finfo(dt).tiny, np.finfo(dt).smallest_subnormal], dt)
    pick = nrng.random(size) < 0.12
    a[pick] = nrng.choice(special, int(pick.sum()))
    bits = a.view(f"u{dt.itemsize}")
    nan = np.isnan(a) & (nrng.random(size) < 0.5)
    bits[nan] |= np.asarray(nrng.integers(1, 7, size), bits.dtype)[nan]
    return a.reshape(shape)


def generate_graph(rng: random.Random, small: bool = False) -> Recorder:
    """A random graph (as its recorder: ``.graph`` and ``.program``).

    Raises ``BuildCrash`` (with the program so far in ``recorder.program``) when a builder
    crashes; the caller keeps that program as the input that reproduces it. ``small``: no huge
    dims and no boundary attribute values (graphs that are cheap to run).
    """
    gen = GraphGen(rng, edge=rng.choice((0.0, 0.03, 0.08, 0.2)) if not small else 0.0,
                   huge=rng.choice((0.0, 0.0, 0.02, 0.1)) if not small else 0.0,
                   symbolic=rng.choice((0.0, 0.2, 0.5)),
                   hostile=rng.choice((0.0, 0.0, 0.03, 0.15)))
    if rng.random() < 0.015:
        gen.chain(rng.choice((300, 1200, 2500)))
    else:
        for _ in range(rng.choice((1, 2, 3, 5, 8, 12, 20))):
            gen.step()
    if not gen.pool:
        gen.fresh(gen.dtype, gen.shape(1, 4))
    gen.outputs()
    return gen.rec


__all__ = ["GraphGen", "Recorder", "BuildCrash", "replay", "apply_step", "generate_graph",
           "random_array", "INT_EDGES", "FLOAT_EDGES", "HUGE_DIMS", "HOSTILE_NAMES"]
