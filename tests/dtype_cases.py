"""One small case per (op, dtype) the op accepts, for the (op, dtype) completeness checks.

``CASES[op](dtype, inp)`` builds the op on operands of ``dtype`` (the op's ``dtypes`` table is
the first operand's) and returns the values to compare; ``inp(dtype, shape, low=...)`` makes a
graph input and its random feed. A case covers the op's other dtype axes and the attribute
choices that change its lowering (``cast`` to every dtype, ``where`` on every branch dtype,
``one_hot`` on every values dtype, nearest and linear ``resample``, pooling with and without
padding, ...). ``cases()`` lists every (op, dtype) with its label; ``batch`` puts many cases in
one graph, so that a target compiles and runs one program for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

import gradc
from gradc import ops
from gradc.check import identical, max_error
from gradc.ir.core import Value
from gradc.ir.ops import REGISTRY
from gradc.ir.ops.adam import STEP_DTYPES
from gradc.ir.ops.movement import ONE_HOT_VALUES
from gradc.ir.types import DType

ANY = tuple(DType)
Inp = Callable[..., Value]
Case = Callable[[str, Inp], Sequence[Value]]

POOL = dict(window_size=(2, 2), strides=(2, 2))
PADDED = dict(window_size=(3, 3), strides=(2, 2), start_padding=(1, 1), end_padding=(1, 0))


def _binary(op: str) -> Case:
    return lambda d, inp: [getattr(ops, op)(inp(d, (2, 3)), inp(d, (3,)))]


def _unary(op: str, low: float | None = None) -> Case:
    return lambda d, inp: [getattr(ops, op)(inp(d, (2, 3), low=low))]


def _cast(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (2, 3), low=0)  # negative floats to unsigned integers are outside SPEC's cast
    return [ops.cast(x, t) for t in ANY]


def _where(d: str, inp: Inp) -> list[Value]:
    c = inp(d, (2, 3))
    return [ops.where(c, inp(t, (2, 3)), inp(t, (3,))) for t in ANY]


def _one_hot(d: str, inp: Inp) -> list[Value]:
    i = inp(d, (2, 1, 3), low=0, high=4)
    return [ops.one_hot(i, inp(t, (2,)), 1, (2, 4, 3)) for t in ONE_HOT_VALUES]


def _element_count(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (2, 3))
    return [ops.element_count(x, (1,), t) for t in ("float64", "float32", "float16", "int64",
                                                    "int32")]


def _conv(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (1, 2, 5, 5))
    out = [ops.convolution(x, inp(d, (3, 2, 3, 3)), inp(d, (1, 3, 1, 1)), strides=(2, 1),
                           start_padding=(1, 0), end_padding=(0, 1)),
           ops.convolution(x, inp(d, (2, 1, 2, 2)), None, mode="convolution", group_count=2),
           ops.convolution(x, inp(d, (2, 3, 2, 2)), None, direction="backward",
                           strides=(2, 2))]
    return out


def _conv_filter_grad(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (1, 2, 5, 5))
    return [ops.convolution_filter_grad(x, inp(d, (1, 3, 3, 3)), (3, 2, 3, 3)),
            ops.convolution_filter_grad(x, inp(d, (1, 2, 2, 2)), (2, 1, 2, 2), strides=(2, 2),
                                        group_count=2)]


def _gemm(d: str, inp: Inp) -> list[Value]:
    a, b = inp(d, (2, 3)), inp(d, (3, 4))
    return [ops.gemm(a, b, inp(d, (1, 4)), alpha=0.5, beta=2.0),
            ops.gemm(inp(d, (3, 2)), inp(d, (4, 3)), None, trans_a=True, trans_b=True)]


def _batch_norm(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (2, 3, 2, 2))
    p = (1, 3, 1, 1)
    return [ops.batch_normalization(x, inp(d, p), inp(d, p, low=0.5), inp(d, p), inp(d, p))]


def _batch_norm_grad(op: str) -> Case:
    def case(d: str, inp: Inp) -> list[Value]:
        x, p = inp(d, (2, 3, 2, 2)), (1, 3, 1, 1)
        return list(getattr(ops, op)(x, inp(d, (2, 3, 2, 2)), inp(d, p), inp(d, p, low=0.5),
                                     inp(d, p)))
    return case


def _batch_norm_training(d: str, inp: Inp) -> list[Value]:
    p = (1, 3, 1, 1)
    return list(ops.batch_normalization_training(inp(d, (2, 3, 2, 2)), inp(d, p), inp(d, p)))


def _adam(d: str, inp: Inp) -> list[Value]:
    x = [inp(d, (2, 3)) for _ in range(3)] + [inp(d, (2, 3), low=0)]
    x[2] = inp(d, (2, 3), low=0)  # the second moment
    return [r for t in STEP_DTYPES for r in ops.adam_optimizer(
        x[0], x[1], x[2], x[3], inp(t, (1,), low=1, high=3), 1e-2, 0.9, 0.999, 1e-8)]


def _max_pooling(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (1, 2, 5, 5))
    return [ops.max_pooling(x, **POOL), *ops.max_pooling(x, **PADDED, output_indices=True)]


def _max_pooling_grad(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (1, 2, 5, 5))
    return [ops.max_pooling_grad(x, inp(d, (1, 2, 2, 2)), **POOL),
            ops.max_pooling_grad(x, inp(d, (1, 2, 3, 2)), **PADDED)]


def _average_pooling(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (1, 2, 5, 5))
    return [ops.average_pooling(x, **POOL), ops.average_pooling(x, **PADDED),
            ops.average_pooling(x, **PADDED, include_padding=True)]


def _average_pooling_grad(d: str, inp: Inp) -> list[Value]:
    return [ops.average_pooling_grad(inp(d, (1, 2, 2, 2)), (1, 2, 5, 5), **POOL),
            ops.average_pooling_grad(inp(d, (1, 2, 3, 2)), (1, 2, 5, 5), **PADDED,
                                     include_padding=True)]


def _resample(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (1, 2, 3, 3))
    out = [ops.resample(x, (1, 1, 2, 1.5))]
    if DType.of(d).is_float or d in ("int8", "uint8"):
        out.append(ops.resample(x, (1, 1, 2, 0.5), "linear"))
    return out


def _resample_grad(d: str, inp: Inp) -> list[Value]:
    return [ops.resample_grad(inp(d, (1, 2, 6, 4)), (1, 2, 3, 3), (1, 1, 2, 1.5)),
            ops.resample_grad(inp(d, (1, 2, 6, 1)), (1, 2, 3, 3), (1, 1, 2, 0.5), "linear")]


def _reduce(op: str) -> Case:
    def case(d: str, inp: Inp) -> list[Value]:
        x = inp(d, (2, 3, 2))
        return [getattr(ops, op)(x, (0, 2)), getattr(ops, op)(x, (1,), keepdims=True),
                getattr(ops, op)(x)]
    return case


def _reduce_grad(op: str) -> Case:
    def case(d: str, inp: Inp) -> list[Value]:
        return [getattr(ops, op)(inp(d, (2, 3, 2), high=2), inp(d, (3,)), (0, 2))]
    return case


def _clip(d: str, inp: Inp) -> list[Value]:
    lo, hi = (-1.5, 2.5) if DType.of(d).is_float else (1, 4)
    return [ops.clip(inp(d, (2, 3)), lo, hi)]


def _clip_grad(d: str, inp: Inp) -> list[Value]:
    lo, hi = (-1.5, 2.5) if DType.of(d).is_float else (1, 4)
    return [ops.clip_grad(inp(d, (2, 3)), inp(d, (2, 3)), lo, hi)]


def _slice(d: str, inp: Inp) -> list[Value]:
    return [ops.slice(inp(d, (3, 5)), (0, 1), (3, 4), (2, -2))]


def _slice_grad(d: str, inp: Inp) -> list[Value]:
    return [ops.slice_grad(inp(d, (2, 2)), (3, 5), (0, 1), (3, 4), (2, -2))]


def _movement(d: str, inp: Inp, op: str) -> list[Value]:
    x = inp(d, (2, 3, 2))
    if op == "reshape":
        return [ops.reshape(x, (3, 4))]
    if op == "expand":  # ``like`` is read for its shape alone: any dtype
        return [ops.expand(inp(d, (3, 1)), inp(t, (2, 3, 2))) for t in (d, "bool", "uint16")]
    if op == "transpose":
        return [ops.transpose(x, (2, 0, 1))]
    if op == "join":
        return [ops.join([x, inp(d, (2, 1, 2))], 1)]
    if op == "split":
        return list(ops.split(x, 1, (1, 2)))
    if op == "pad":
        return [ops.pad(x, (1, 0, 2), (0, 1, 0), padding_value=1)]
    return [ops.identity(x)]


def _mv(op: str) -> Case:
    return lambda d, inp: _movement(d, inp, op)


def _random(d: str, inp: Inp) -> list[Value]:
    return list(ops.random_generator(inp(d, (6,)), (2, 3)))


def _constant(d: str, inp: Inp) -> list[Value]:
    x = inp(d, (2,))
    return [ops.identity(ops.constant(np.array([1, 0], DType.of(d).numpy), graph=x.graph)), x]


def _softmax(op: str) -> Case:
    return lambda d, inp: [getattr(ops, op)(inp(d, (2, 3, 2)), (1,))]


CASES: dict[str, Case] = {
    **{op: _binary(op) for op in ("add", "sub", "mul", "div", "maximum", "minimum", "equal",
                                  "greater", "greater_equal", "less", "less_equal")},
    **{op: _unary(op) for op in ("neg", "relu", "exp", "sigmoid", "tanh", "erf", "sin", "cos",
                                 "is_nan")},
    "gelu": lambda d, inp: [ops.gelu(inp(d, (2, 3))), ops.gelu(inp(d, (2, 3)), "tanh")],
    "mean_variance_normalization": lambda d, inp: [
        ops.mean_variance_normalization(inp(d, (2, 3, 4)), inp(d, (4,)), inp(d, (4,))),
        ops.mean_variance_normalization(inp(d, (2, 3, 4)), inp(d, (3, 1)), None, axes=(1, 2),
                                        use_mean=False)],
    "mean_variance_normalization_grad": lambda d, inp: list(
        ops.mean_variance_normalization_grad(inp(d, (2, 3, 4)), inp(d, (2, 3, 4)), inp(d, (4,)))),
    "gather": lambda d, inp: [ops.gather(inp(d, (3, 4)), inp("int64", (2, 2), low=-3, high=2)),
                              ops.gather(inp(d, (3, 4)), inp("int32", (3,), low=0, high=3),
                                         axis=1)],
    "gather_grad": lambda d, inp: [ops.gather_grad(inp(d, (2, 2, 4)),
                                                   inp("int64", (2, 2), low=-3, high=2), (3, 4))],
    "gelu_grad": lambda d, inp: [ops.gelu_grad(inp(d, (2, 3)), inp(d, (2, 3))),
                                 ops.gelu_grad(inp(d, (2, 3)), inp(d, (2, 3)), "tanh")],
    "log": _unary("log", low=0.25), "sqrt": _unary("sqrt", low=0),
    "pow": lambda d, inp: [ops.pow(inp(d, (2, 3), low=0.25), 1.5)],
    "leaky_relu": lambda d, inp: [ops.leaky_relu(inp(d, (2, 3)), 0.25)],
    "relu_grad": lambda d, inp: [ops.relu_grad(inp(d, (2, 3)), inp(d, (2, 3)))],
    "cast": _cast, "where": _where, "one_hot": _one_hot, "element_count": _element_count,
    "clip": _clip, "clip_grad": _clip_grad, "slice": _slice, "slice_grad": _slice_grad,
    **{op: _mv(op) for op in ("reshape", "expand", "transpose", "join", "split", "pad",
                              "identity")},
    "convolution": _conv, "convolution_filter_grad": _conv_filter_grad, "gemm": _gemm,
    "batch_normalization": _batch_norm,
    "batch_normalization_grad": _batch_norm_grad("batch_normalization_grad"),
    "batch_normalization_training": _batch_norm_training,
    "batch_normalization_training_grad": _batch_norm_grad("batch_normalization_training_grad"),
    "adam_optimizer": _adam, "max_pooling": _max_pooling, "max_pooling_grad": _max_pooling_grad,
    "average_pooling": _average_pooling, "average_pooling_grad": _average_pooling_grad,
    "resample": _resample, "resample_grad": _resample_grad,
    **{op: _reduce(op) for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")},
    **{op: _reduce_grad(op) for op in ("reduce_max_grad", "reduce_min_grad")},
    "softmax": _softmax("softmax"), "log_softmax": _softmax("log_softmax"),
    "random_generator": _random, "constant": _constant,
}


def op_dtypes(op: str) -> tuple[DType, ...]:
    """The dtypes of an op's first operand (``constant``, which has none: every dtype)."""
    return REGISTRY[op].dtypes or ANY


def cases() -> list[tuple[str, str]]:
    """Every (op, dtype name) pair to check."""
    return [(op, d.value) for op in sorted(REGISTRY) if op != "fused" for d in op_dtypes(op)]


def random_feed(rng: np.random.Generator, dtype: str, shape: tuple[int, ...],
                low: float | None = None, high: float | None = None) -> np.ndarray:
    """Small values every dtype holds exactly: quarters in [-4, 4] for floats, integers in
    [-5, 5] ([0, 10] unsigned); ``low``/``high`` narrow the range."""
    dt = DType.of(dtype)
    if dt == DType.bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.is_float:
        lo, hi = -4.0 if low is None else low, 4.0 if high is None else high
        return (rng.integers(int(lo * 4), int(hi * 4) + 1, shape) / 4.0).astype(dt.numpy)
    signed = np.issubdtype(dt.numpy, np.signedinteger)
    lo = int(low) if low is not None else (-5 if signed else 0)
    hi = int(high) if high is not None else (5 if signed else 10)
    return rng.integers(lo, hi + 1, shape).astype(dt.numpy)


@dataclass
class Batch:
    """Many cases in one graph: ``outputs[(op, dtype)]`` names that case's outputs."""

    graph: gradc.Graph
    feeds: dict[str, np.ndarray]
    outputs: dict[tuple[str, str], list[str]]


def batch(pairs: Sequence[tuple[str, str]], seed: int = 0, name: str = "dtypes") -> Batch:
    """One graph holding the case of every (op, dtype) in ``pairs``."""
    g = gradc.Graph(name)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    outputs: dict[tuple[str, str], list[str]] = {}

    def inp(dtype: Any, shape: tuple[int, ...], low: float | None = None,
            high: float | None = None) -> Value:
        name = f"i{len(feeds)}"
        dt = DType.of(dtype)
        feeds[name] = random_feed(rng, dt.value, shape, low, high)
        return g.input(name, dt, shape)

    for op, dtype in pairs:
        names = []
        for v in CASES[op](dtype, inp):
            out = g.output(v, f"o{len(g.outputs)}")
            names.append(out.name)
        outputs[(op, dtype)] = names
    return Batch(g, feeds, outputs)


def compare(target_exact: bool, got: np.ndarray, want: np.ndarray, floor: float,
            libm: bool = False) -> bool:
    """``gradc check``'s rule: bits on an exact target (a tolerance where the C target calls
    libm), otherwise 64 ulps of the largest value of the output's dtype."""
    if target_exact and not libm:
        return identical(got, want)
    return max_error(got, want, floor)[1]
