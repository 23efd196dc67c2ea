"""Optimizer composites (SPEC-training.md §19.2-§19.3): ``sgd``, ``adam``, ``adamw``.

They follow ``torch.optim`` (the single-tensor CPU algorithms) operation by operation, built from
primitives: every line is element-wise, so a fusion pass can make one kernel of a step. The
results are the updated state; they are not differentiated (§9.7: optimizer steps sit outside
the differentiated graph). Constants derived from the float32 hyperparameters are computed in
float64 and rounded once to the parameters' dtype (§9.3).

``adam`` and ``adamw`` need ``beta ** T`` for the integer step ``T`` inside the graph (one
compiled step serves every step): it is ``exp(T * ln(beta))`` in float64. Its relative error is
about ``|T ln(beta)|`` float64 ulps, and where that is large ``beta ** T`` is negligible next to 1,
so ``1 - beta ** T`` agrees with Python's ``1 - beta ** T`` to a few float64 ulps (§19.2).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.training_args import ArgCheck
from gradc.ir.types import DType

F64 = DType.float64


def const(v: float, dtype: DType) -> Value:
    """A rank-0 constant: ``v`` (a float64 value) rounded once to ``dtype``."""
    return B.constant(np.array(v, np.float64).astype(dtype.numpy))


def scalar_step(step: Value) -> Value:
    """The one-element step counter as a rank-0 value."""
    return step if step.type.rank == 0 else B.reshape(step, ())


def sgd(parameters: Value, gradient: Value, learning_rate: float,
        momentum_buffer: Value | None = None, training_step: Value | None = None,
        momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
        nesterov: bool = False) -> tuple[Value, Value | None]:
    """PyTorch's ``SGD`` step (§19.3): ``(output_parameters, output_momentum_buffer or None)``.

    ``g = gradient + weight_decay * p``; with momentum, ``b = momentum * b + (1 - dampening) * g``
    (``b = g`` at the first step) and ``g = b`` (``g + momentum * b`` with ``nesterov``); then
    ``p = p - learning_rate * g``.
    """
    c = ArgCheck("sgd")
    p = c.floating("parameters", parameters, 0, 8)
    g = c.like("gradient", gradient, p, "parameters")
    lr = c.real("learning_rate", learning_rate, 0.0)
    mom = c.real("momentum", momentum, 0.0)
    damp = c.real("dampening", dampening, 0.0)
    wd = c.real("weight_decay", weight_decay, 0.0)
    nest = c.boolean("nesterov", nesterov)
    if mom != 0:
        if momentum_buffer is None:
            c.fail("momentum_buffer", "a value (momentum != 0)", "None")
        buf = c.like("momentum_buffer", momentum_buffer, p, "parameters")
        if damp != 0:
            if training_step is None:
                c.fail("training_step", "a value (momentum and dampening != 0)", "None")
            step = c.step("training_step", training_step)
    if nest and (mom <= 0 or damp != 0):
        c.fail("nesterov", "momentum > 0 and dampening == 0 (PyTorch's rule)",
               f"momentum {mom:g}, dampening {damp:g}")
    dt = p.type.dtype
    if wd != 0:
        g = B.add(g, B.mul(p, const(wd, dt)))
    out_buf = None
    if mom != 0:
        b = B.add(B.mul(buf, const(mom, dt)), B.mul(g, const(1.0 - damp, dt)))
        if damp != 0:
            t = scalar_step(step)
            first = B.equal(t, B.constant(np.array(1, t.type.dtype.numpy)))
            b = B.where(first, g, b)  # PyTorch's first step: the buffer is the gradient
        out_buf = b
        g = B.add(g, B.mul(b, const(mom, dt))) if nest else b
    return B.sub(p, B.mul(g, const(lr, dt))), out_buf


def _beta_power(t64: Value, beta: float) -> Value:
    """``beta ** T`` in float64 as ``exp(T * ln(beta))`` (``ln(0) = -inf`` gives 0)."""
    ln = math.log(beta) if beta > 0 else -math.inf
    return B.exp(B.mul(t64, B.constant(np.array(ln, np.float64))))


def _adam(name: str, decoupled: bool, input_parameters: Value, input_first_moment: Value,
          input_second_moment: Value, gradient: Value, training_step: Value,
          learning_rate: float, beta1: float, beta2: float, epsilon: float,
          weight_decay: float) -> tuple[Value, Value, Value]:
    c = ArgCheck(name)
    x = c.floating("input_parameters", input_parameters, 0, 8)
    m = c.like("input_first_moment", input_first_moment, x, "input_parameters")
    v = c.like("input_second_moment", input_second_moment, x, "input_parameters")
    g = c.like("gradient", gradient, x, "input_parameters")
    step = c.step("training_step", training_step)
    lr = c.real("learning_rate", learning_rate, 0.0)
    b1 = c.real("beta1", beta1, 0.0, 1.0, hi_open=True)
    b2 = c.real("beta2", beta2, 0.0, 1.0, hi_open=True)
    eps = c.real("epsilon", epsilon, 0.0)
    wd = c.real("weight_decay", weight_decay, 0.0)
    dt = x.type.dtype
    if decoupled:
        x = B.mul(x, const(1.0 - lr * wd, dt))  # decoupled decay
    elif wd != 0:
        g = B.add(g, B.mul(x, const(wd, dt)))  # Adam's L2 term
    m = B.add(m, B.mul(B.sub(g, m), const(1.0 - b1, dt)))  # lerp(M, G, 1 - b1)
    v = B.add(B.mul(v, const(b2, dt)), B.mul(B.mul(g, g), const(1.0 - b2, dt)))
    t64 = B.cast(scalar_step(step), F64)
    one = const(1.0, F64)
    bc1 = B.sub(one, _beta_power(t64, b1))
    bc2 = B.sub(one, _beta_power(t64, b2))
    root_bc2 = _to(B.sqrt(bc2), dt)
    step_size = _to(B.div(const(lr, F64), bc1), dt)
    denom = B.add(B.div(B.sqrt(v), root_bc2), const(eps, dt))
    x = B.sub(x, B.mul(B.div(m, denom), step_size))
    return x, m, v


def _to(v: Value, dtype: DType) -> Value:
    return v if v.type.dtype == dtype else B.cast(v, dtype)


def adam(input_parameters: Value, input_first_moment: Value, input_second_moment: Value,
         gradient: Value, training_step: Value, learning_rate: float, beta1: float = 0.9,
         beta2: float = 0.999, epsilon: float = 1e-8,
         weight_decay: float = 0.0) -> tuple[Value, Value, Value]:
    """PyTorch's ``Adam`` step (§19.2): ``(parameters, first moment, second moment)``.

    ``g = gradient + weight_decay * p``; ``m = m + (g - m) * (1 - beta1)``,
    ``v = beta2 * v + (1 - beta2) * g * g``; then, with T the training step,
    ``p = p - m / (sqrt(v) / sqrt(1 - beta2**T) + epsilon) * learning_rate / (1 - beta1**T)``.
    """
    return _adam("adam", False, input_parameters, input_first_moment, input_second_moment,
                 gradient, training_step, learning_rate, beta1, beta2, epsilon, weight_decay)


def adamw(input_parameters: Value, input_first_moment: Value, input_second_moment: Value,
          gradient: Value, training_step: Value, learning_rate: float, beta1: float = 0.9,
          beta2: float = 0.999, epsilon: float = 1e-8,
          weight_decay: float = 0.01) -> tuple[Value, Value, Value]:
    """PyTorch's ``AdamW`` step (§19.2): ``(parameters, first moment, second moment)``.

    ``adam`` with decoupled weight decay: ``p`` is first multiplied by
    ``1 - learning_rate * weight_decay``, and the gradient is used as it is.
    """
    return _adam("adamw", True, input_parameters, input_first_moment, input_second_moment,
                 gradient, training_step, learning_rate, beta1, beta2, epsilon, weight_decay)


__all__: list[Any] = ["sgd", "adam", "adamw"]
