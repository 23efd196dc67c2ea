"""Steps of ``fuzz.onnx_training_models``: data movement, math, comparisons, Dropout, Flatten,
Squeeze/Unsqueeze and the exporters' shape subgraphs (SPEC-training.md §21).

A step takes the current value and its dims and appends nodes, returning the new value and dims,
or None when it does not apply (an op gradc does not import yet, a rank it does not take).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Optional

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

Dims = list[Any]
Step = Optional[tuple[str, Dims]]


def st(d: Any) -> int:
    """A dim as a static size (a symbol or a bad value counts 2)."""
    return d if isinstance(d, int) and d > 0 else 2


def prod_side(dims: Dims) -> Any:
    """The product of a Flatten side: an int, the one symbol times 1s, else 2 (refused)."""
    syms = [d for d in dims if isinstance(d, str)]
    if not syms:
        return math.prod(dims)
    return syms[0] if len(syms) == 1 and all(d == 1 for d in dims if isinstance(d, int)) else 2


class MovementSteps:
    """The steps of this module, as a mixin of ``TrainingModelGen`` (which has the rest)."""

    rng: random.Random
    opset: int
    dt: np.dtype
    elem: int
    cur_elem: int
    done: bool
    outputs: list[tuple[str, int, int]]
    nodes: list[onnx.NodeProto]
    has: Callable[..., bool]
    node: Callable[..., list[str]]
    weight: Callable[..., str]
    const: Callable[..., str]
    ints: Callable[[list[int]], list[int]]
    int_: Callable[[int], int]
    float_: Callable[[float], float]
    neg: Callable[[int, int, float], int]
    axes_form: Callable[..., str]

    def s_concat(self, x: str, dims: Dims) -> Step:
        if not self.has("Concat") or not dims:
            return None
        r = len(dims)
        axis = self.rng.choice([i for i, d in enumerate(dims) if isinstance(d, int)] or [0])
        ins, total = [x], dims[axis]
        for _ in range(self.rng.randint(1, 2)):
            if self.rng.random() < 0.3:
                ins.append(x)
                total = total + dims[axis] if isinstance(total, int) else 2
            else:
                other = list(dims)
                other[axis] = self.rng.randint(1, 3)
                ins.append(self.weight(other))
                total = total + other[axis] if isinstance(total, int) else 2
        self.rng.shuffle(ins)
        out = list(dims)
        out[axis] = total
        a = self.neg(axis, r, 0.3)
        return self.node("Concat", ins, axis=self.int_(a))[0], out

    def s_split(self, x: str, dims: Dims) -> Step:
        if not self.has("Split") or not dims:
            return None
        r = len(dims)
        static = [i for i, d in enumerate(dims) if isinstance(d, int)]
        axis = self.rng.choice(static) if static and self.rng.random() < 0.9 else \
            self.rng.randrange(r)
        n = st(dims[axis])
        attrs: dict[str, Any] = {}
        if axis or self.rng.random() < 0.5:
            attrs["axis"] = self.int_(self.neg(axis, r, 0.3))
        parts = self.rng.randint(1, min(n, 3))
        sizes: list[int] | None = None
        ins = [x]
        if self.opset >= 18 and self.rng.random() < 0.5:
            attrs["num_outputs"] = self.int_(parts)
            each = -(-n // parts)
            got = [each] * (n // each) + ([n % each] if n % each else [])
            if len(got) != parts:
                return None
            sizes = got
        elif self.rng.random() < 0.3 and n % parts == 0 and self.opset < 18:
            sizes = [n // parts] * parts
        else:
            cuts = sorted(self.rng.sample(range(1, n), parts - 1)) if parts > 1 else []
            sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
            if self.opset < 13:
                attrs["split"] = self.ints(sizes)
            else:
                ins.append(self.const(self.ints(sizes)))
        outs = self.node("Split", ins, len(sizes), **attrs)
        self.outputs += [(o, self.cur_elem, r) for o in outs[1:] if self.rng.random() < 0.5]
        out = list(dims)
        out[axis] = sizes[0]
        return outs[0], out

    def s_transpose(self, x: str, dims: Dims) -> Step:
        if not self.has("Transpose") or not dims:
            return None
        perm = list(range(len(dims)))
        if self.rng.random() < 0.2:
            return self.node("Transpose", [x])[0], dims[::-1]
        self.rng.shuffle(perm)
        return self.node("Transpose", [x], perm=self.ints(perm))[0], [dims[p] for p in perm]

    def s_pad(self, x: str, dims: Dims) -> Step:
        if not self.has("Pad") or not dims:
            return None
        r = len(dims)
        pads = [[0, 0] for _ in dims]
        for i, d in enumerate(dims):
            if isinstance(d, int) and self.rng.random() < 0.6:
                lo = -(d - 1) // 2 if self.rng.random() < 0.3 else 0
                pads[i] = [self.rng.randint(lo, 2), self.rng.randint(lo, 2)]
                if d + sum(pads[i]) < 1:
                    pads[i] = [0, 0]
        flat = [p[0] for p in pads] + [p[1] for p in pads]
        mode = self.rng.choice(("edge", "reflect", "wrap")) if self.rng.random() < 0.05 \
            else "constant"
        attrs: dict[str, Any] = {"mode": mode} if mode != "constant" or \
            self.rng.random() < 0.2 else {}
        value = self.float_(self.rng.choice((0.0, 1.5, -0.0)))
        if self.opset < 11:
            y = self.node("Pad", [x], pads=self.ints(flat), value=value, **attrs)[0]
        else:
            ins = [x, self.const(self.ints(flat))]
            if self.opset >= 18 and self.rng.random() < 0.3:
                axes = [i for i in range(r) if pads[i] != [0, 0]] or [0]
                ins = [x, self.const(self.ints([pads[a][0] for a in axes]
                                               + [pads[a][1] for a in axes]))]
                ins += [self.const(np.array(value, self.dt), self.dt)
                        if self.rng.random() < 0.5 else "",
                        self.const([self.neg(a, r, 0.3) for a in axes])]
            elif self.rng.random() < 0.5:
                ins.append(self.const(np.array(value, self.dt), self.dt))
            y = self.node("Pad", ins, **attrs)[0]
        return y, [d + p[0] + p[1] if isinstance(d, int) else d for d, p in zip(dims, pads)]

    def s_softmax(self, x: str, dims: Dims) -> Step:
        op = self.rng.choice(("Softmax", "LogSoftmax"))
        if not self.has(op) or not dims:
            return None
        attrs: dict[str, Any] = {}
        if self.rng.random() < 0.6:
            r = len(dims)
            a = self.rng.randrange(r)
            attrs["axis"] = self.int_(self.neg(a, r, 0.4))
        return self.node(op, [x], **attrs)[0], dims

    def s_unary(self, x: str, dims: Dims) -> Step:
        op = self.rng.choice(("Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "LeakyRelu", "LeakyRelu"))
        if not self.has(op):
            return None
        attrs: dict[str, Any] = {}
        if op == "LeakyRelu" and self.rng.random() < 0.6:
            attrs["alpha"] = self.float_(self.rng.choice((0.01, 0.2, -0.5, 1.0)))
        return self.node(op, [x], **attrs)[0], dims

    def _broadcast_shape(self, dims: Dims) -> Dims:
        k = self.rng.randint(0, len(dims))
        return [1 if self.rng.random() < 0.3 else st(d) if isinstance(d, int) else 1
                for d in dims[k:]]

    def s_binary(self, x: str, dims: Dims) -> Step:
        op = self.rng.choice(("Div", "Div", "Pow", "Max", "Min"))
        if not self.has(op):
            return None
        if op == "Pow":
            if self.rng.random() < 0.1:
                e = self.weight([1])  # not a constant (or a parameter): refused
            else:
                e = self.const(np.array(self.float_(self.rng.choice((2.0, 0.5, 3.0, -1.0))),
                                        self.rng.choice((np.float32, np.float64, np.int64)))
                               .reshape(self.rng.choice(((), (1,)))),
                               self.rng.choice((np.float32, np.int64, np.float64)))
            return self.node("Pow", [x, e])[0], dims
        if op == "Div":
            w = self.weight(self._broadcast_shape(dims), positive=self.rng.random() < 0.7)
            return self.node("Div", [x, w] if self.rng.random() < 0.8 else [w, x])[0], dims
        ins = [x] + [self.weight(self._broadcast_shape(dims))
                     for _ in range(self.rng.choice((0, 1, 1, 2)))]
        self.rng.shuffle(ins)
        return self.node(op, ins)[0], dims

    def s_compare(self, x: str, dims: Dims) -> Step:
        op = self.rng.choice(("Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"))
        if not self.has(op) or (op.endswith("OrEqual") and self.opset < 12):
            return None
        w = self.weight(self._broadcast_shape(dims))
        cond = self.node(op, [x, w] if self.rng.random() < 0.7 else [w, x])[0]
        if self.has("Where") and self.rng.random() < 0.8:
            other = self.weight(self._broadcast_shape(dims))
            pair = [x, other] if self.rng.random() < 0.5 else [other, x]
            return self.node("Where", [cond, *pair])[0], dims
        self.cur_elem, self.done = TensorProto.BOOL, True
        return cond, dims

    def s_dropout(self, x: str, dims: Dims) -> Step:
        if not self.has("Dropout"):
            return None
        n_out = 2 if self.rng.random() < 0.3 else 1
        if self.opset < 12:
            attrs = {"ratio": self.float_(0.5)} if self.rng.random() < 0.5 else {}
            outs = self.node("Dropout", [x], n_out, **attrs)
        else:
            ins = [x]
            if self.rng.random() < 0.7:
                ratio = self.float_(self.rng.choice((0.5, 0.0, 0.25)))
                ins.append(self.const(np.array(ratio, np.float32), np.float32)
                           if self.rng.random() < 0.9 else "")
                if self.rng.random() < 0.6:
                    ins.append(self.const(np.array(self.rng.random() < 0.6), np.bool_))
            if self.rng.random() < 0.2:
                attrs = {"seed": self.int_(self.rng.randint(0, 100))}
            else:
                attrs = {}
            outs = self.node("Dropout", ins, n_out, **attrs)
        if n_out == 2 and self.rng.random() < 0.7:
            self.outputs.append((outs[1], TensorProto.BOOL, len(dims)))
        return outs[0], dims

    def s_flatten(self, x: str, dims: Dims) -> Step:
        if not self.has("Flatten") or not dims:
            return None
        r = len(dims)
        axis = self.rng.randint(0, r)
        if self.rng.random() < 0.9 and isinstance(dims[0], str):
            axis = 1  # (N, d...) sides that stay importable, mostly
        attrs = {"axis": self.int_(self.neg(axis, r, 0.3) if 0 < axis < r else axis)} \
            if axis != 1 or self.rng.random() < 0.3 else {}
        return self.node("Flatten", [x], **attrs)[0], [prod_side(dims[:axis]),
                                                       prod_side(dims[axis:])]

    def s_squeeze(self, x: str, dims: Dims) -> Step:
        ones = [i for i, d in enumerate(dims) if d == 1]
        if self.rng.random() < 0.5 or not ones:
            if not self.has("Unsqueeze") or len(dims) > 5:
                return None
            r = len(dims) + self.rng.randint(1, 2)
            axes = sorted(self.rng.sample(range(r), r - len(dims)))
            out, it = [], iter(dims)
            for i in range(r):
                out.append(1 if i in axes else next(it))
            return self.axes_form("Unsqueeze", x, [self.neg(a, r, 0.3)
                                                   for a in axes], 13), out
        if not self.has("Squeeze"):
            return None
        r = len(dims)
        if self.rng.random() < 0.2:
            return self.node("Squeeze", [x])[0], [d for d in dims if d != 1]
        axes = sorted(self.rng.sample(ones, self.rng.randint(1, len(ones))))
        return self.axes_form("Squeeze", x, [self.neg(a, r, 0.3)
                                             for a in axes], 13), \
            [d for i, d in enumerate(dims) if i not in axes]

    # -- the exporters' shape subgraphs ---------------------------------------------------------
    def s_shape_reshape(self, x: str, dims: Dims) -> Step:
        """Shape -> Gather(0) -> Unsqueeze -> Concat(·, [-1]) -> Reshape (torch's flatten)."""
        if not self.has("Shape", "Gather", "Unsqueeze", "Concat", "Reshape") or len(dims) < 2:
            return None
        shp = self.node("Shape", [x])[0]
        if self.rng.random() < 0.5:
            g = self.node("Gather", [shp, self.const(0)], axis=0)[0]
            lead = self.axes_form("Unsqueeze", g, [0], 13)
        else:
            lead = self.node("Gather", [shp, self.const([0])], axis=0)[0]
        tail = self.const([-1])
        cat = self.node("Concat", [lead, tail], axis=0)[0]
        return self.node("Reshape", [x, cat])[0], [dims[0], prod_side(dims[1:])]

    def s_shape_expand(self, x: str, dims: Dims) -> Step:
        """Expand(w, Shape(x)) or ConstantOfShape(Shape(x)), combined with x."""
        if not self.has("Shape", "Mul") or not dims:
            return None
        shp = self.node("Shape", [x])[0]
        if self.has("Expand") and self.rng.random() < 0.6:
            w = self.weight([1] * self.rng.randint(0, len(dims) - 1) + [st(dims[-1])]
                            if isinstance(dims[-1], int) else [1])
            other = self.node("Expand", [w, shp])[0]
        elif self.has("ConstantOfShape"):
            val = numpy_helper.from_array(np.array([self.rng.choice((1.0, 0.5, 2.0))], self.dt))
            other = self.node("ConstantOfShape", [shp], value=val)[0]
        else:
            return None
        return self.node(self.rng.choice(("Mul", "Add")), [x, other])[0], dims

    def s_shape_resize(self, x: str, dims: Dims) -> Step:
        """Resize to sizes Concat(Slice(Shape(x), 0, 2), [2h, 2w]) (an upsampling export)."""
        if not self.has("Shape", "Slice", "Concat", "Resize") or len(dims) != 4 \
                or self.opset < 11:
            return None
        shp = self.node("Shape", [x])[0]
        head = self.node("Slice", [shp, self.const([0]), self.const([2])])[0]
        hw = [2 * st(dims[2]), 2 * st(dims[3])]
        sizes = self.node("Concat", [head, self.const(hw)], axis=0)[0]
        mode = self.rng.choice(("nearest", "linear"))
        if self.opset < 13:  # roi and scales are required inputs there: empty tensors
            empty = [self.const(np.zeros(0, np.float32), np.float32) for _ in range(2)]
        else:
            empty = ["", ""]
        y = self.node("Resize", [x, *empty, sizes], mode=mode)[0]
        return y, [*dims[:2], *hw]


__all__ = ["MovementSteps", "Dims", "Step", "st", "prod_side"]
