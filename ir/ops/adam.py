"""DirectML's Adam step (SPEC-training.md §19.1): ``adam_optimizer``, three results.

``M <- b1*M + (1-b1)*G``, ``V <- b2*V + (1-b2)*G*G``,
``X <- X - lr*sqrt(1-b2**T)/(1-b1**T) * M / (sqrt(V) + eps)``: the bias correction once per
call in float64 from the float32 hyperparameters, rounded to ``ACC``; every element-wise step
rounded in ``ACC`` in SPEC's order. Not differentiated (§9.7).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.core import Value
from gradc.ir.ops.common import F, acc_dtype
from gradc.ir.ops.registry import PURE, Attr, Checker, OpDef, register, show_value
from gradc.ir.types import DType, TensorType

STEP_DTYPES = (DType.int32, DType.int64, DType.uint32)
MOMENTS = ("input_first_moment", "input_second_moment", "gradient")


def real_number(c: Checker, name: str, lo: float | None = None, hi: float | None = None,
                hi_open: bool = False, what: str | None = None) -> float:
    """A float scalar (SPEC-training §9.3): a real number rounded once to float32, finite after
    rounding, in ``[lo, hi]`` (``[lo, hi)`` with ``hi_open``); stored as that float32 value."""
    v = c.raw.get(name)
    if v is None:
        a = c.schema.get(name) if c.schema is not None else None
        v = a.default if a is not None else None
    return c.keep(name, check_real(c.op, name, v, lo, hi, hi_open, what))


def check_real(op: str, name: str, v: Any, lo: float | None = None, hi: float | None = None,
               hi_open: bool = False, what: str | None = None) -> float:
    """``real_number`` for a composite's argument: VerifyError ``<op>: <name>: ...``."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        raise VerifyError(f"{op}: {name}: expected a real number, got {show_value(v, repr)}")
    try:
        with np.errstate(over="ignore"):
            f = float(np.float32(v))
    except OverflowError:
        f = math.inf if v > 0 else -math.inf
    rng = _range_text(lo, hi, hi_open)
    if not math.isfinite(f):
        raise VerifyError(f"{op}: {name}: expected a finite float32{rng}, got "
                          f"{show_value(v)} (rounds to {f})")
    if (lo is not None and f < lo) or (hi is not None and (f >= hi if hi_open else f > hi)):
        raise VerifyError(f"{op}: {name}: expected {what or 'a float32' + rng}, got "
                          f"{show_value(v)}")
    return f


def _range_text(lo: float | None, hi: float | None, hi_open: bool) -> str:
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f" >= {lo:g}"
    return f" in [{lo:g}, {hi:g}{')' if hi_open else ']'}"


@register
class AdamOptimizer(OpDef):
    """``adam_optimizer(input_parameters, input_first_moment, input_second_moment, gradient,
    training_step, learning_rate, beta1, beta2, epsilon)``: one Adam step as DirectML defines it:
    ``M = beta1*M + (1-beta1)*g``, ``V = beta2*V + (1-beta2)*g*g``, then the parameters move by
    ``learning_rate * sqrt(1-beta2**T) / (1-beta1**T) * M / (sqrt(V) + epsilon)`` (T the training
    step); returns (parameters, first moment, second moment)."""

    name = "adam_optimizer"
    transcendental = True
    operands = ("input_parameters", "input_first_moment", "input_second_moment", "gradient",
                "training_step")
    attributes = (Attr("learning_rate", "floats"), Attr("beta1", "floats", 0.9),
                  Attr("beta2", "floats", 0.999), Attr("epsilon", "floats", 1e-8))
    traits = PURE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input_parameters", self.dtypes)
        c.rank_in("input_parameters", 1, 8)
        for name in MOMENTS:
            c.same_dtype(name, "input_parameters")
            c.same_shape(name, "input_parameters")
        step = c.t("training_step")
        if step.rank > 8 or any(d != 1 for d in step.shape):
            c.fail("training_step.shape", "one element (every dim 1, rank 0..8)", step.shape)
        c.dtype_in("training_step", STEP_DTYPES)
        real_number(c, "learning_rate")
        real_number(c, "beta1", 0.0, 1.0, hi_open=True)
        real_number(c, "beta2", 0.0, 1.0, hi_open=True)
        real_number(c, "epsilon", 0.0)
        t = c.t("input_parameters")
        return [t, t, t]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, m: np.ndarray, v: np.ndarray,
                  g: np.ndarray, step: np.ndarray) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        lr, b1, b2, eps = (attrs[k] for k in ("learning_rate", "beta1", "beta2", "epsilon"))
        t = np.float64(int(step.reshape(-1)[0]))
        with np.errstate(all="ignore"):  # T = 0 gives 0/0 = NaN, by the formula
            b1t = np.power(np.float64(b1), t)  # libm pow on scalars, as the C target's pow
            b2t = np.power(np.float64(b2), t)
            corr = np.sqrt(np.float64(1.0) - b2t) / (np.float64(1.0) - b1t)  # once per call
            lr_step = a(a(lr) * a(corr))
            c1, c2 = a(1.0 - float(b1)), a(1.0 - float(b2))
            ga = g.astype(a)
            mo = a(b1) * m.astype(a) + c1 * ga
            vo = a(b2) * v.astype(a) + c2 * (ga * ga)
            u = (lr_step * mo) / (np.sqrt(vo) + a(eps))
            xo = x.astype(a) - u
            return [xo.astype(x.dtype), mo.astype(x.dtype), vo.astype(x.dtype)]

    def vjp(self, node: Any, grads: Sequence[Value | None]) -> list[Value | None]:
        """An optimizer step is not differentiated: its inputs get no gradient."""
        return [None] * 5
