"""Generators for the operators of real training graphs (SPEC-training.md §10-20).

A mixin of ``GraphGen`` (fuzz/graphgen.py): one method per family, each building a valid call
mostly (small static shapes, symbolic batch dims now and then) and, through ``ints`` and
``maybe_edge_*``, boundary attribute values now and then, so both the checklists (§22.12) and
the lowerings are exercised. ``MAKERS`` lists each method with its weight and the builders it
needs: a maker whose builders gradc does not have is skipped.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from gradc.ir.core import Value

FLOATS = ("float32", "float16", "float64")
NUMERIC = ("float32", "float16", "float64", "int32", "int64", "int8", "uint8", "int16",
           "uint16", "uint32", "uint64")


class TrainingOpsMixin:
    """Random calls of the training-graph operators; see the module docstring."""

    rng: random.Random
    edge: float
    pool: list[Value]
    tensor: Callable[..., Value | None]
    value_of: Callable[..., Value | None]
    emit: Callable[..., None]
    ints: Callable[..., list[Any]]
    maybe_edge_int: Callable[..., Any]
    maybe_edge_float: Callable[..., Any]
    symbol: str
    rec: Any

    def rec_op(self, op: str, operands: Sequence[Any], attrs: dict[str, Any]
               ) -> tuple[Value, ...]:
        """Apply a builder, keep its results in the pool and return them (() when refused)."""
        if any(x is None for x in operands):
            return ()
        outs = self.rec.op(op, operands, attrs)
        self.pool.extend(outs)
        return outs

    def _spatial_attrs(self, spatial: Sequence[int], windows: Sequence[int]) -> dict[str, Any]:
        nd = len(spatial)
        attrs: dict[str, Any] = {}
        if self.rng.random() < 0.6:
            attrs["strides"] = self.ints([self.rng.randint(1, 2) for _ in range(nd)])
        if self.rng.random() < 0.5:
            attrs["start_padding"] = self.ints([self.rng.randint(0, k - 1) for k in windows])
            attrs["end_padding"] = self.ints([self.rng.randint(0, k - 1) for k in windows])
        if self.rng.random() < 0.3:
            attrs["dilations"] = self.ints([self.rng.randint(1, 2) for _ in range(nd)])
        return attrs

    def _batch(self) -> Any:
        return self.symbol if self.rng.random() < 0.2 else self.rng.randint(1, 2)

    # -- §10 convolution -----------------------------------------------------------------------
    def convolution(self) -> None:
        dtype = self.rng.choice(FLOATS)
        nd = self.rng.choice((1, 2, 2, 3))
        groups = self.rng.choice((1, 1, 2))
        ci, co = groups * self.rng.randint(1, 2), groups * self.rng.randint(1, 2)
        k = [self.rng.randint(1, 3) for _ in range(nd)]
        spatial = [self.rng.randint(kk, kk + 3) for kk in k]
        x = self.value_of(dtype, [self._batch(), ci, *spatial])
        backward = self.rng.random() < 0.3
        wshape = [ci, co // groups, *k] if backward else [co, ci // groups, *k]
        w = self.value_of(dtype, wshape)
        attrs = self._spatial_attrs(spatial, k)
        attrs["group_count"] = self.maybe_edge_int(groups)
        if backward:
            attrs["direction"] = "backward"
        if self.rng.random() < 0.2:
            attrs["mode"] = "convolution"
        operands: list[Any] = [x, w]
        if self.rng.random() < 0.5:
            operands.append(self.value_of(dtype, [1, co] + [1] * nd))
        if self.rng.random() < 0.3 and x is not None and w is not None:
            y = self.rec_op("convolution", operands[:2], attrs)
            if y:
                dy = self.value_of(dtype, y[0].type.shape)
                self.emit("convolution_filter_grad", [x, dy],
                          {**attrs, "output_sizes": wshape})
            return
        self.emit("convolution", operands, attrs)

    # -- §11 gemm ------------------------------------------------------------------------------
    def gemm(self) -> None:
        dtype = self.rng.choice(FLOATS)
        m, k, n = (self.rng.randint(1, 4) for _ in range(3))
        batch = [self.rng.randint(1, 2) for _ in range(self.rng.choice((0, 0, 1, 2)))]
        ta, tb = self.rng.random() < 0.3, self.rng.random() < 0.3
        a = self.value_of(dtype, batch + ([k, m] if ta else [m, k]))
        b = self.value_of(dtype, batch + ([n, k] if tb else [k, n]))
        operands: list[Any] = [a, b]
        if self.rng.random() < 0.5:
            operands.append(self.value_of(dtype, self.rng.choice(([m, n], [1, n], [n]))
                                          if not batch else batch + [m, n]))
        attrs: dict[str, Any] = {"trans_a": ta, "trans_b": tb}
        if self.rng.random() < 0.3:
            attrs["alpha"] = self.maybe_edge_float(self.rng.choice((0.5, 2.0, -1.0)))
            attrs["beta"] = self.maybe_edge_float(self.rng.choice((0.0, 1.0, 0.25)))
        self.emit("gemm", operands, attrs)

    # -- §12 batch normalization ---------------------------------------------------------------
    def batch_norm(self) -> None:
        dtype = self.rng.choice(FLOATS)
        c = self.rng.randint(1, 3)
        rest = [self.rng.randint(1, 3) for _ in range(self.rng.choice((0, 2)))]
        x = self.value_of(dtype, [self._batch(), c, *rest])
        stat = [1, c] + [1] * len(rest)
        scale, bias = self.value_of(dtype, stat), self.value_of(dtype, stat)
        eps = {"epsilon": self.maybe_edge_float(1e-5)}
        kind = self.rng.random()
        if kind < 0.4:
            self.emit("batch_normalization_training", [x, scale, bias], eps)
        elif kind < 0.7:
            mean, var = self.value_of(dtype, stat), self.value_of(dtype, stat)
            self.emit("batch_normalization", [x, mean, var, scale, bias], eps)
        else:
            op = self.rng.choice(("batch_normalization_grad", "batch_normalization_training_grad"))
            dy = self.value_of(dtype, x.type.shape) if x is not None else None
            mean, var = self.value_of(dtype, stat), self.value_of(dtype, stat)
            self.emit(op, [x, dy, mean, var, scale], eps)

    # -- §13 average pooling -------------------------------------------------------------------
    def average_pooling(self) -> None:
        x = self.tensor(FLOATS, 4, 5, static_from=2)
        if x is None:
            return
        spatial = [int(d) for d in x.type.shape[2:]]
        w = [self.rng.randint(1, min(n, 3)) for n in spatial]
        attrs = {"window_size": self.ints(w), **self._spatial_attrs(spatial, w),
                 "include_padding": self.rng.random() < 0.5}
        if self.rng.random() < 0.4:
            y = self.rec_op("average_pooling", [x], attrs)
            if y:
                dy = self.value_of(x.type.dtype.value, y[0].type.shape)
                self.emit("average_pooling_grad", [dy],
                          {**attrs, "output_sizes": list(x.type.shape)})
            return
        self.emit("average_pooling", [x], attrs)

    # -- §14 reductions, §17 softmax -----------------------------------------------------------
    def _axes(self, rank: int) -> Any:
        if not rank or self.rng.random() < 0.2:
            return None
        axes = sorted(self.rng.sample(range(rank), self.rng.randint(1, rank)))
        return self.ints([a - rank if self.rng.random() < 0.2 else a for a in axes])

    def reductions(self) -> None:
        op = self.rng.choice(("reduce_mean", "reduce_max", "reduce_min", "reduce_max_grad",
                              "reduce_min_grad", "element_count", "softmax", "log_softmax"))
        float_only = op not in ("reduce_max", "reduce_min", "element_count")
        lo = 1 if op in ("softmax", "log_softmax") else 0
        x = self.tensor(FLOATS if float_only else NUMERIC, lo, 4)
        if x is None:
            return
        axes = self._axes(x.type.rank)
        if op in ("softmax", "log_softmax"):
            self.emit(op, [x], {"axes": axes if axes is not None else [x.type.rank - 1]})
        elif op.endswith("_grad"):
            keep = self.rng.random() < 0.5
            y = self.rec_op(op[:-5], [x], {"axes": axes, "keepdims": keep})
            if y:
                dy = self.value_of(x.type.dtype.value, y[0].type.shape)
                self.emit(op, [x, dy], {"axes": axes, "keepdims": keep})
        elif op == "element_count":
            self.emit(op, [x], {"axes": axes, "dtype": self.rng.choice(FLOATS)})
        else:
            self.emit(op, [x], {"axes": axes, "keepdims": self.rng.random() < 0.5})

    # -- §15 data movement, §18.1 one-hot ------------------------------------------------------
    def movement(self) -> None:
        kind = self.rng.choice(("join", "split", "transpose", "pad", "one_hot"))
        if kind == "one_hot":
            idx = self.value_of(self.rng.choice(("int64", "int32")), [2, 1])
            vals = self.value_of(self.rng.choice(FLOATS), [2])
            axis = self.rng.choice((0, 1))
            out = [2, 1]
            out[axis] = self.maybe_edge_int(self.rng.randint(1, 4))
            self.emit("one_hot", [idx, vals], {"axis": axis, "output_sizes": out})
            return
        x = self.tensor(NUMERIC, 1, 4, static_from=0)
        if x is None:
            return
        shape = [int(d) for d in x.type.shape]
        axis = self.rng.randrange(len(shape))
        if kind == "join":
            other = list(shape)
            other[axis] = self.rng.randint(1, 3)
            y = self.value_of(x.type.dtype.value, other)
            self.emit("join", [[x, y]], {"axis": self.maybe_edge_int(axis)})
        elif kind == "split":
            n = shape[axis]
            cut = self.rng.randint(0, n)
            sizes = [s for s in (cut, n - cut) if s] or [n]
            self.emit("split", [x], {"axis": axis, "split_sizes": self.ints(sizes)})
        elif kind == "transpose":
            perm = list(range(len(shape)))
            self.rng.shuffle(perm)
            self.emit("transpose", [x], {"permutation": self.ints(perm)})
        else:
            start = self.ints([self.rng.randint(0, 2) for _ in shape])
            end = self.ints([self.rng.randint(0, 2) for _ in shape])
            val = self.rng.choice((0, 1, -1)) if not x.type.dtype.is_float else \
                self.maybe_edge_float(self.rng.choice((0.0, -0.0, 1.5)))
            self.emit("pad", [x], {"start_padding": start, "end_padding": end,
                                   "padding_value": val})

    # -- §16 element-wise math -----------------------------------------------------------------
    def elementwise_math(self) -> None:
        op = self.rng.choice(("div", "exp", "log", "sqrt", "pow", "maximum", "minimum",
                              "greater", "less", "equal", "greater_equal", "less_equal",
                              "where", "sigmoid", "tanh", "leaky_relu"))
        binary = op in ("div", "maximum", "minimum", "greater", "less", "equal",
                        "greater_equal", "less_equal")
        dtypes = FLOATS if op in ("div", "exp", "log", "sqrt", "pow", "sigmoid", "tanh",
                                  "leaky_relu") else NUMERIC
        a = self.tensor(dtypes, 0, 4)
        if a is None:
            return
        if binary:
            shape = [1 if self.rng.random() < 0.3 else d for d in a.type.shape]
            self.emit(op, [a, self.value_of(a.type.dtype.value, shape)], {})
        elif op == "where":
            cond = self.value_of("bool", a.type.shape)
            self.emit(op, [cond, a, self.value_of(a.type.dtype.value, a.type.shape)], {})
        elif op == "pow":
            self.emit(op, [a], {"exponent": self.maybe_edge_float(
                self.rng.choice((2.0, 0.5, -1.0, 3.0)))})
        elif op == "leaky_relu":
            self.emit(op, [a], {"alpha": self.maybe_edge_float(0.01)})
        else:
            self.emit(op, [a], {})

    # -- §18-20 losses, optimizers, random numbers ---------------------------------------------
    def losses(self) -> None:
        dtype = self.rng.choice(FLOATS)
        n, c = self._batch(), self.rng.randint(2, 4)
        extra = [self.rng.randint(1, 3) for _ in range(self.rng.choice((0, 0, 1, 2)))]
        dims = [n, c, *extra]
        axis = 1  # SPEC-transformers §29.1: the classes on any axis (class_axis)
        if self.rng.random() < 0.3:
            axis = self.rng.randrange(len(dims))
            dims = [n, *extra]
            dims.insert(axis, c)
        scores = self.value_of(dtype, dims)
        labels = self.value_of("int64", dims[:axis] + dims[axis + 1:])
        kind = self.rng.choice(("softmax_cross_entropy", "negative_log_likelihood",
                                "mean_squared_error"))
        reduction = self.rng.choice(("mean", "sum", "none"))
        if kind == "mean_squared_error":
            target = self.value_of(dtype, dims)
            self.emit(kind, [scores, target], {"reduction": reduction})
            return
        attrs: dict[str, Any] = {"reduction": reduction}
        if axis != 1 or self.rng.random() < 0.1:
            given = axis - len(dims) if self.rng.random() < 0.4 else axis
            attrs["class_axis"] = self.maybe_edge_int(given)
        if self.rng.random() < 0.3:
            label = self.rng.choice((self.rng.randint(0, c - 1), -100))
            attrs["ignore_index"] = self.maybe_edge_int(label)
        if kind == "softmax_cross_entropy" and self.rng.random() < 0.3:
            attrs["label_smoothing"] = self.maybe_edge_float(0.1)
        operands: list[Any] = [scores, labels]
        if self.rng.random() < 0.3:
            operands.append(self.value_of(dtype, [c]))
        self.emit(kind, operands, attrs)

    def optimizers(self) -> None:
        dtype = self.rng.choice(FLOATS)
        shape = [self.rng.randint(1, 3) for _ in range(self.rng.randint(1, 3))]
        p, g = self.value_of(dtype, shape), self.value_of(dtype, shape)
        step = self.value_of(self.rng.choice(("int64", "int32")), [1])
        lr = self.maybe_edge_float(self.rng.choice((0.1, 1e-3)))
        kind = self.rng.choice(("sgd", "adam", "adamw", "adam_optimizer"))
        if kind == "sgd":
            momentum = self.rng.choice((0.0, 0.9))
            attrs: dict[str, Any] = {"momentum": momentum,
                                     "weight_decay": self.rng.choice((0.0, 0.01)),
                                     "nesterov": momentum > 0 and self.rng.random() < 0.5}
            # values go as operands (positions), never inside the attributes of a program step
            state = [self.value_of(dtype, shape), step] if momentum else []
            self.emit("sgd", [p, g, lr, *state], attrs)
            return
        m, v = self.value_of(dtype, shape), self.value_of(dtype, shape)
        attrs = {"beta1": self.maybe_edge_float(0.9), "beta2": self.maybe_edge_float(0.999)}
        self.emit(kind, [p, m, v, g, step, lr], attrs)

    def random_numbers(self) -> None:
        state = self.value_of("uint32", [6])
        if self.rng.random() < 0.5:
            out = [self.rng.randint(1, 5) for _ in range(self.rng.randint(1, 3))]
            self.emit("random_generator", [state], {"output_sizes": self.ints(out)})
            return
        x = self.tensor(FLOATS, 1, 4)
        self.emit("dropout", [x, state], {"ratio": self.maybe_edge_float(
            self.rng.choice((0.5, 0.0, 0.9)))})


MAKERS: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("convolution", 3, ("convolution", "convolution_filter_grad")),
    ("gemm", 3, ("gemm",)),
    ("batch_norm", 3, ("batch_normalization", "batch_normalization_training",
                       "batch_normalization_grad", "batch_normalization_training_grad")),
    ("average_pooling", 2, ("average_pooling", "average_pooling_grad")),
    ("reductions", 3, ("reduce_mean", "reduce_max", "reduce_min", "reduce_max_grad",
                       "reduce_min_grad", "element_count", "softmax", "log_softmax")),
    ("movement", 3, ("join", "split", "transpose", "pad", "one_hot")),
    ("elementwise_math", 4, ("div", "exp", "log", "sqrt", "pow", "maximum", "minimum",
                             "greater", "less", "equal", "greater_equal", "less_equal",
                             "where", "sigmoid", "tanh", "leaky_relu")),
    ("losses", 2, ("softmax_cross_entropy", "negative_log_likelihood", "mean_squared_error")),
    ("optimizers", 2, ("sgd", "adam", "adamw", "adam_optimizer")),
    ("random_numbers", 2, ("random_generator", "dropout")),
)

__all__ = ["TrainingOpsMixin", "MAKERS"]
