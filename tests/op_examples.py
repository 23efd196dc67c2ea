"""One small graph per registered op (several for ops whose lowerings differ by dtype).

``EXAMPLES`` maps a label (``op`` or ``op/variant``) to an ``Example``: the graph's inputs as
(name, dtype, shape) and the builder call. ``feeds(example, seed)`` gives random inputs that the
op accepts (indices in range, a valid random state, ...). ``tests/test_onnx_readback.py`` walks
every example; a new op needs an entry here (the test names the missing ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import gradc
from gradc import ops

Spec = tuple[str, str, tuple]  # (input name, dtype, shape); a str dim is symbolic


@dataclass(frozen=True)
class Example:
    """A graph of one op: inputs, the builder call, and how to fill the inputs."""

    inputs: tuple[Spec, ...]
    build: Callable[..., Any]
    summing: bool = False  # results within SPEC's tolerance, not bit for bit
    fill: dict[str, Callable[[np.random.Generator, tuple], np.ndarray]] = field(
        default_factory=dict)

    @property
    def op(self) -> str:
        """The op the example is about (its graph may hold helper constants too)."""
        return self.label.split("/")[0]

    label: str = ""

    def graph(self) -> gradc.Graph:
        """The example's graph, outputs y0, y1, ..."""
        g = gradc.Graph("example")
        vals = [g.input(n, d, s) for n, d, s in self.inputs]
        out = self.build(*vals)
        for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
            g.output(v, f"y{i}")
        return g


def _ints(lo: int, hi: int, dtype: str = "int64") -> Callable[[np.random.Generator, tuple],
                                                             np.ndarray]:
    return lambda rng, shape: rng.integers(lo, hi, shape).astype(dtype)


def _positive(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    return (rng.random(shape) + 0.5).astype(np.float32)


F4 = ("N", 3, 4, 4)  # a symbolic batch, where the op takes one
X4 = (("x", "float32", F4),)
X23 = (("x", "float32", (2, 3)),)
XY23 = (("x", "float32", (2, 3)), ("y", "float32", (3,)))
POOL = dict(window_size=(2, 2), strides=(2, 2))
POOL3 = dict(window_size=(3, 3), strides=(1, 1), start_padding=(1, 1), end_padding=(1, 1))
RS = dict(scales=(1.0, 1.0, 2.0, 0.5))

_RAW: dict[str, Example] = {
    # elementwise arithmetic, per dtype class (the lowerings differ)
    "add": Example(XY23, ops.add),
    "add/int8": Example((("x", "int8", (2, 3)), ("y", "int8", (2, 3))), ops.add),
    "add/float16": Example((("x", "float16", (2, 3)), ("y", "float16", (3,))), ops.add),
    "sub": Example(XY23, ops.sub),
    "sub/uint16": Example((("x", "uint16", (4,)), ("y", "uint16", (4,))), ops.sub),
    "mul": Example(XY23, ops.mul),
    "mul/int64": Example((("x", "int64", (4,)), ("y", "int64", (4,))), ops.mul),
    "div": Example(XY23, ops.div),
    "div/float16": Example((("x", "float16", (4,)), ("y", "float16", (4,))), ops.div),
    "neg": Example(X23, ops.neg),
    "neg/uint8": Example((("x", "uint8", (5,)),), ops.neg),
    "maximum": Example(XY23, ops.maximum),
    "maximum/int32": Example((("x", "int32", (4,)), ("y", "int32", (4,))), ops.maximum),
    "minimum": Example(XY23, ops.minimum),
    "minimum/uint64": Example((("x", "uint64", (4,)), ("y", "uint64", (4,))), ops.minimum),
    "equal": Example(XY23, ops.equal),
    "greater": Example(XY23, ops.greater),
    "greater_equal": Example(XY23, ops.greater_equal),
    "less": Example((("x", "int16", (4,)), ("y", "int16", (4,))), ops.less),
    "less_equal": Example(XY23, ops.less_equal),
    "where": Example((("c", "bool", (2, 3)),) + XY23, ops.where),
    "where/int64": Example((("c", "bool", (4,)), ("x", "int64", (4,)), ("y", "int64", (4,))),
                           ops.where),
    "where/int16": Example((("c", "bool", (4,)), ("x", "int16", (4,)), ("y", "int16", (4,))),
                           ops.where),
    "exp": Example(X23, ops.exp),
    "log": Example(X23, ops.log),
    "sqrt": Example(X23, ops.sqrt),
    "sigmoid": Example(X23, ops.sigmoid),
    "tanh": Example(X23, ops.tanh),
    "erf": Example(X23, ops.erf),
    "sin": Example(X23, ops.sin),
    "cos": Example(X23, ops.cos),
    "is_nan": Example(X23, ops.is_nan),
    "gelu": Example(X23, ops.gelu),
    "gelu/tanh": Example(X23, lambda x: ops.gelu(x, "tanh")),
    # op by op, gelu_grad is the ONNX lowering's formula (Erf, Exp, ...): §25.4's tolerance
    "gelu_grad": Example((("x", "float32", (2, 3)), ("dy", "float32", (2, 3))), ops.gelu_grad,
                         summing=True),
    "mean_variance_normalization": Example(
        (("x", "float32", ("N", 3, 4)), ("s", "float32", (4,)), ("b", "float32", (4,))),
        ops.mean_variance_normalization, summing=True),
    "mean_variance_normalization/rms": Example(
        (("x", "float32", (2, 3, 4)), ("s", "float32", (3, 1))),
        lambda x, s: ops.mean_variance_normalization(x, s, None, axes=(1, 2), use_mean=False),
        summing=True),
    "mean_variance_normalization_grad": Example(
        (("x", "float32", (2, 4)), ("dy", "float32", (2, 4)), ("s", "float32", (4,))),
        ops.mean_variance_normalization_grad, summing=True),
    "gather": Example((("x", "float32", (3, 4)), ("i", "int64", ("N", 2))), ops.gather,
                      fill={"i": _ints(-3, 3)}),
    "gather_grad": Example((("dy", "float32", (2, 2, 4)), ("i", "int32", (2, 2))),
                           lambda dy, i: ops.gather_grad(dy, i, (3, 4)), summing=True,
                           fill={"i": _ints(-3, 3, "int32")}),
    "pow": Example(X23, lambda x: ops.pow(x, 3.0)),
    "pow/half": Example(X23, lambda x: ops.pow(x, 0.5)),
    "leaky_relu": Example(X23, lambda x: ops.leaky_relu(x, 0.125)),
    "relu": Example(X4, ops.relu),
    "relu/int8": Example((("x", "int8", (5,)),), ops.relu),
    "relu_grad": Example((("x", "float32", (2, 3)), ("dy", "float32", (2, 3))), ops.relu_grad),
    "clip": Example(X23, lambda x: ops.clip(x, -1.0, 2.0)),
    "clip/uint8": Example((("x", "uint8", (5,)),), lambda x: ops.clip(x, 3, 200)),
    "clip_grad": Example((("x", "float32", (2, 3)), ("dy", "float32", (2, 3))),
                         lambda x, dy: ops.clip_grad(x, dy, -1.0, 2.0)),
    "cast": Example(X23, lambda x: ops.cast(x, "int32")),
    "cast/f64_f16": Example((("x", "float64", (5,)),), lambda x: ops.cast(x, "float16")),
    "cast/bool": Example((("x", "bool", (5,)),), lambda x: ops.cast(x, "float32")),
    "identity": Example(X23, ops.identity),
    "constant": Example(X23, lambda x: ops.add(x, ops.constant(
        np.array([0.5, -2.0, 3.0], np.float32)))),
    # shapes and data movement
    "reshape": Example(X4, lambda x: ops.reshape(x, ("N", 12, 4))),
    "expand": Example((("x", "float32", (1, 3)), ("l", "float32", ("N", 3))), ops.expand),
    "transpose": Example(X4, lambda x: ops.transpose(x, (0, 2, 3, 1))),
    "join": Example((("x", "float32", (2, 3)), ("y", "float32", (1, 3))),
                    lambda x, y: ops.join([x, y], 0)),
    "split": Example(X23, lambda x: ops.split(x, 1, (1, 2))),
    "pad": Example(X23, lambda x: ops.pad(x, (1, 0), (0, 2), -0.0)),
    "slice": Example(X4, lambda x: ops.slice(x, (0, 0, 0, 1), ("N", 3, 4, 3), (1, 1, 2, -2))),
    "slice_grad": Example((("dy", "float32", (2, 3, 2, 2)),), lambda dy: ops.slice_grad(
        dy, (2, 3, 4, 4), (0, 0, 0, 1), (2, 3, 4, 3), (1, 1, 2, -2))),
    "one_hot": Example((("i", "int64", (2, 3, 1)), ("v", "float32", (2,))),
                       lambda i, v: ops.one_hot(i, v, -1, (2, 3, 4)),
                       fill={"i": _ints(-4, 4)}),
    # reductions and softmax
    "reduce_sum": Example(X4, lambda x: ops.reduce_sum(x, (1, 3), True), summing=True),
    "reduce_sum/int32": Example((("x", "int32", (2, 3)),), lambda x: ops.reduce_sum(x, (0,))),
    "reduce_mean": Example(X4, lambda x: ops.reduce_mean(x, (2, 3)), summing=True),
    "reduce_max": Example(X4, lambda x: ops.reduce_max(x, (1,), True)),
    "reduce_min": Example((("x", "int8", (2, 3)),), lambda x: ops.reduce_min(x, None)),
    "reduce_max_grad": Example((("x", "float32", (2, 3)), ("dy", "float32", (2,))),
                               lambda x, dy: ops.reduce_max_grad(x, dy, (1,))),
    "reduce_min_grad": Example((("x", "float32", (2, 3)), ("dy", "float32", (1, 3))),
                               lambda x, dy: ops.reduce_min_grad(x, dy, (0,), True)),
    "element_count": Example(X4, lambda x: ops.element_count(x, (0, 2), "float64")),
    "softmax": Example(X4, lambda x: ops.softmax(x, (3,)), summing=True),
    "log_softmax": Example(X23, lambda x: ops.log_softmax(x, (1,)), summing=True),
    # windows
    "max_pooling": Example(X4, lambda x: ops.max_pooling(x, **POOL)),
    "max_pooling/indices": Example((("x", "float16", (1, 2, 5, 5)),), lambda x: ops.max_pooling(
        x, (3, 3), (2, 2), (1, 1), (1, 1), output_indices=True)),
    "max_pooling_grad": Example((("x", "float32", F4), ("dy", "float32", ("N", 3, 2, 2))),
                                lambda x, dy: ops.max_pooling_grad(x, dy, **POOL),
                                summing=True),
    "max_pooling_grad/overlap": Example(
        (("x", "float32", (1, 1, 4, 4)), ("dy", "float32", (1, 1, 4, 4))),
        lambda x, dy: ops.max_pooling_grad(x, dy, **POOL3), summing=True),
    "average_pooling": Example(X4, lambda x: ops.average_pooling(
        x, (2, 2), (1, 1), (1, 0), (0, 1)), summing=True),
    "average_pooling_grad": Example((("dy", "float32", (1, 3, 2, 2)),), lambda dy:
                                    ops.average_pooling_grad(dy, (1, 3, 4, 4), **POOL),
                                    summing=True),
    "resample": Example(X4, lambda x: ops.resample(x, **RS)),
    "resample/linear": Example(X4, lambda x: ops.resample(x, interpolation_mode="linear", **RS),
                               summing=True),
    "resample_grad": Example((("dy", "float32", ("N", 3, 8, 2)),), lambda dy: ops.resample_grad(
        dy, F4, interpolation_mode="linear", **RS), summing=True),
    "resample_grad/nearest": Example((("dy", "float32", (1, 3, 8, 2)),), lambda dy:
                                     ops.resample_grad(dy, (1, 3, 4, 4), **RS), summing=True),
    # training ops
    "convolution": Example((("x", "float32", ("N", 2, 5, 5)), ("w", "float32", (4, 1, 3, 3)),
                            ("b", "float32", (1, 4, 1, 1))), lambda x, w, b: ops.convolution(
        x, w, b, strides=(2, 1), start_padding=(1, 1), end_padding=(1, 0), group_count=2),
        summing=True),
    "convolution/float64": Example(
        (("x", "float64", (1, 1, 4, 4)), ("w", "float64", (1, 2, 2, 2))),
        lambda x, w: ops.convolution(x, w, direction="backward", strides=(2, 2)), summing=True),
    "convolution_filter_grad": Example(
        (("x", "float32", (2, 2, 5, 5)), ("dy", "float32", (2, 4, 3, 3))),
        lambda x, dy: ops.convolution_filter_grad(x, dy, (4, 2, 3, 3)), summing=True),
    "gemm": Example((("a", "float32", (3, 2)), ("b", "float32", (4, 2)), ("c", "float32", (1, 4))),
                    lambda a, b, c: ops.gemm(a, b, c, trans_b=True, alpha=0.5), summing=True),
    "batch_normalization": Example(
        (("x", "float32", ("N", 3, 2, 2)),) + tuple((n, "float32", (1, 3, 1, 1)) for n in
                                                    ("m", "v", "s", "b")),
        ops.batch_normalization, summing=True, fill={"v": lambda r, s: _positive(r, s)}),
    "batch_normalization_training": Example(
        (("x", "float32", (2, 3, 2, 2)), ("s", "float32", (1, 3, 1, 1)),
         ("b", "float32", (1, 3, 1, 1))), ops.batch_normalization_training, summing=True),
    "batch_normalization_grad": Example(
        (("x", "float32", (2, 3, 2)), ("dy", "float32", (2, 3, 2))) + tuple(
            (n, "float32", (1, 3, 1)) for n in ("m", "v", "s")),
        ops.batch_normalization_grad, summing=True, fill={"v": lambda r, s: _positive(r, s)}),
    "batch_normalization_training_grad": Example(
        (("x", "float32", (2, 3, 2)), ("dy", "float32", (2, 3, 2))) + tuple(
            (n, "float32", (1, 3, 1)) for n in ("m", "v", "s")),
        ops.batch_normalization_training_grad, summing=True,
        fill={"v": lambda r, s: _positive(r, s)}),
    "adam_optimizer": Example(
        tuple((n, "float32", (2, 3)) for n in ("p", "m", "v", "g")) + (
            ("step", "int64", (1,)),),
        lambda p, m, v, g, step: ops.adam_optimizer(p, m, v, g, step, 0.01), summing=True,
        fill={"v": lambda r, s: _positive(r, s), "step": _ints(1, 5)}),
    "random_generator": Example((("state", "uint32", (6,)),),
                                lambda s: ops.random_generator(s, (2, 5))),
}

EXAMPLES: dict[str, Example] = {
    label: Example(e.inputs, e.build, e.summing, e.fill, label) for label, e in _RAW.items()}


def feeds(example: Example, seed: int) -> dict[str, np.ndarray]:
    """Random inputs for the example (symbolic dims 2), special float values included."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, dtype, shape in example.inputs:
        concrete = tuple(2 if isinstance(d, str) else d for d in shape)
        if name in example.fill:
            out[name] = np.ascontiguousarray(example.fill[name](rng, concrete))
            continue
        dt = np.dtype(dtype)
        if dt.kind == "b":
            out[name] = rng.random(concrete) < 0.5
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            a = rng.integers(max(info.min, -100), min(info.max, 100), concrete, endpoint=True)
            edge = rng.random(concrete) < 0.1
            out[name] = np.where(edge, info.max, a).astype(dt)
        else:
            a = rng.normal(0, 2, concrete).astype(dt)
            special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dt)
            pick = rng.random(concrete) < 0.1
            a[pick] = rng.choice(special, size=int(pick.sum()))
            out[name] = a
    return out


def shapes(example: Example) -> dict[str, int]:
    """The symbol values that ``feeds`` uses."""
    return {d: 2 for _, _, s in example.inputs for d in s if isinstance(d, str)}
