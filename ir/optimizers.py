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

A learning-rate schedule (SPEC-transformers.md §29.3) is written into the graph too:
``scheduled_learning_rate`` computes ``lr_t = lr * factor(step)`` in float64 from the step
counter, and each composite takes that rank-0 float64 value as its ``learning_rate`` in place of
a number; every scalar it derives from ``lr_t`` (SGD's ``lr_t``, Adam's ``lr_t / bc1``, AdamW's
``1 - lr_t * weight_decay``) is computed in float64 and rounded once where it meets a tensor, as
the constants of a fixed ``lr`` are.
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
SCHEDULES = ("warmup_linear", "warmup_cosine")


def const(v: float, dtype: DType) -> Value:
    """A rank-0 constant: ``v`` (a float64 value) rounded once to ``dtype`` (§9.3: a value
    past the dtype's range rounds to an infinity, e.g. ``max_grad_norm=1e10`` in float16)."""
    with np.errstate(over="ignore"):
        return B.constant(np.array(v, np.float64).astype(dtype.numpy))


def scalar_step(step: Value) -> Value:
    """The one-element step counter as a rank-0 value."""
    return step if step.type.rank == 0 else B.reshape(step, ())


def sgd(parameters: Value, gradient: Value, learning_rate: float | Value,
        momentum_buffer: Value | None = None, training_step: Value | None = None,
        momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
        nesterov: bool = False) -> tuple[Value, Value | None]:
    """PyTorch's ``SGD`` step: ``(output_parameters, output_momentum_buffer or None)``.

    ``g = gradient + weight_decay * p``; with momentum, ``b = momentum * b + (1 - dampening) * g``
    (``b = g`` at the first step) and ``g = b`` (``g + momentum * b`` with ``nesterov``); then
    ``p = p - learning_rate * g``. ``learning_rate``: a number, or a rank-0 float64 value
    (``scheduled_learning_rate``).
    """
    c = ArgCheck("sgd")
    p = c.floating("parameters", parameters, 0, 8)
    g = c.like("gradient", gradient, p, "parameters")
    lr = _learning_rate(c, learning_rate)
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
    return B.sub(p, B.mul(g, _to(lr, dt) if isinstance(lr, Value) else const(lr, dt))), out_buf


def _beta_power(t64: Value, beta: float) -> Value:
    """``beta ** T`` in float64 as ``exp(T * ln(beta))`` (``ln(0) = -inf`` gives 0)."""
    ln = math.log(beta) if beta > 0 else -math.inf
    return B.exp(B.mul(t64, B.constant(np.array(ln, np.float64))))


def _adam(name: str, decoupled: bool, input_parameters: Value, input_first_moment: Value,
          input_second_moment: Value, gradient: Value, training_step: Value,
          learning_rate: float | Value, beta1: float, beta2: float, epsilon: float,
          weight_decay: float) -> tuple[Value, Value, Value]:
    c = ArgCheck(name)
    x = c.floating("input_parameters", input_parameters, 0, 8)
    m = c.like("input_first_moment", input_first_moment, x, "input_parameters")
    v = c.like("input_second_moment", input_second_moment, x, "input_parameters")
    g = c.like("gradient", gradient, x, "input_parameters")
    step = c.step("training_step", training_step)
    lr = _learning_rate(c, learning_rate)
    b1 = c.real("beta1", beta1, 0.0, 1.0, hi_open=True)
    b2 = c.real("beta2", beta2, 0.0, 1.0, hi_open=True)
    eps = c.real("epsilon", epsilon, 0.0)
    wd = c.real("weight_decay", weight_decay, 0.0)
    dt = x.type.dtype
    lr64 = lr if isinstance(lr, Value) else const(lr, F64)
    if decoupled:  # decoupled decay: 1 - lr * wd in float64, rounded once
        x = B.mul(x, _to(B.sub(const(1.0, F64), B.mul(lr, const(wd, F64))), dt)
                  if isinstance(lr, Value) else const(1.0 - lr * wd, dt))
    elif wd != 0:
        g = B.add(g, B.mul(x, const(wd, dt)))  # Adam's L2 term
    m = B.add(m, B.mul(B.sub(g, m), const(1.0 - b1, dt)))  # lerp(M, G, 1 - b1)
    v = B.add(B.mul(v, const(b2, dt)), B.mul(B.mul(g, g), const(1.0 - b2, dt)))
    t64 = B.cast(scalar_step(step), F64)
    one = const(1.0, F64)
    bc1 = B.sub(one, _beta_power(t64, b1))
    bc2 = B.sub(one, _beta_power(t64, b2))
    root_bc2 = _to(B.sqrt(bc2), dt)
    step_size = _to(B.div(lr64, bc1), dt)
    denom = B.add(B.div(B.sqrt(v), root_bc2), const(eps, dt))
    x = B.sub(x, B.mul(B.div(m, denom), step_size))
    return x, m, v


def _to(v: Value, dtype: DType) -> Value:
    return v if v.type.dtype == dtype else B.cast(v, dtype)


def adam(input_parameters: Value, input_first_moment: Value, input_second_moment: Value,
         gradient: Value, training_step: Value, learning_rate: float | Value, beta1: float = 0.9,
         beta2: float = 0.999, epsilon: float = 1e-8,
         weight_decay: float = 0.0) -> tuple[Value, Value, Value]:
    """PyTorch's ``Adam`` step: ``(parameters, first moment, second moment)``.

    ``g = gradient + weight_decay * p``; ``m = m + (g - m) * (1 - beta1)``,
    ``v = beta2 * v + (1 - beta2) * g * g``; then, with T the training step,
    ``p = p - m / (sqrt(v) / sqrt(1 - beta2**T) + epsilon) * learning_rate / (1 - beta1**T)``.
    """
    return _adam("adam", False, input_parameters, input_first_moment, input_second_moment,
                 gradient, training_step, learning_rate, beta1, beta2, epsilon, weight_decay)


def adamw(input_parameters: Value, input_first_moment: Value, input_second_moment: Value,
          gradient: Value, training_step: Value, learning_rate: float | Value, beta1: float = 0.9,
          beta2: float = 0.999, epsilon: float = 1e-8,
          weight_decay: float = 0.01) -> tuple[Value, Value, Value]:
    """PyTorch's ``AdamW`` step: ``(parameters, first moment, second moment)``.

    ``adam`` with decoupled weight decay: ``p`` is first multiplied by
    ``1 - learning_rate * weight_decay``, and the gradient is used as it is.
    """
    return _adam("adamw", True, input_parameters, input_first_moment, input_second_moment,
                 gradient, training_step, learning_rate, beta1, beta2, epsilon, weight_decay)


def _learning_rate(c: ArgCheck, v: Any) -> float | Value:
    """A float32 number >= 0 (§9.3), or a rank-0 float64 value computed in the graph."""
    if not isinstance(v, Value):
        return c.real("learning_rate", v, 0.0)
    if v.type.dtype != F64 or v.type.rank != 0:
        c.fail("learning_rate", "a number or a float64 scalar value (a schedule)", v.type)
    return v


def scheduled_learning_rate(step: Value, learning_rate: float, schedule: str,
                            warmup_steps: int, total_steps: int) -> Value:
    """``lr_t = lr * factor(step - 1)`` in float64 (SPEC-transformers §29.3): the factors of
    transformers' ``get_linear_schedule_with_warmup`` (``"warmup_linear"``) and
    ``get_cosine_schedule_with_warmup`` (``"warmup_cosine"``, half a cosine), one op per line
    of the spec; ``step`` is the 1-based update counter, ``learning_rate`` the float32 ``lr``."""
    c = ArgCheck("scheduled_learning_rate")
    step = c.step("training_step", step)
    lr = c.real("learning_rate", learning_rate, 0.0)
    kind = c.choice("schedule", schedule, SCHEDULES)
    w, total = float(warmup_steps), float(total_steps)  # exact: ints below 2**53
    t = B.sub(B.cast(scalar_step(step), F64), const(1.0, F64))
    warm = B.div(t, const(max(1.0, w), F64))
    span = const(max(1.0, total - w), F64)
    zero = const(0.0, F64)
    if kind == "warmup_linear":
        decay = B.div(B.sub(const(total, F64), t), span)
    else:
        prog = B.div(B.sub(t, const(w, F64)), span)
        decay = B.mul(const(0.5, F64), B.add(const(1.0, F64),
                                             B.cos(B.mul(const(math.pi, F64), prog))))
    decay = B.where(B.greater(decay, zero), decay, zero)  # max(0, .): NaN never arises here
    factor = B.where(B.less(t, const(w, F64)), warm, decay)
    return B.mul(const(lr, F64), factor)


ACC = {DType.float16: DType.float32, DType.float32: DType.float32, DType.float64: F64}
WIDTH = {DType.float16: 0, DType.float32: 1, DType.float64: 2}


def clip_grad_norm(gradients: list[Value], max_grad_norm: float) -> list[Value]:
    """The gradients scaled by ``min(1, max/(total + 1e-6))``, ``total`` their global L2 norm:
    ``torch.nn.utils.clip_grad_norm_`` (foreach path), one op per line of SPEC-transformers
    §29.2. The per-gradient norms are summed row-major in ``ACC`` (float16 squares in float32)
    and rounded to the gradients' widest dtype ``T`` before the norm of norms."""
    c = ArgCheck("clip_grad_norm")
    if not gradients:
        c.fail("gradients", "at least one gradient", "none")
    grads = [c.floating(f"gradients[{i}]", g, 0, 8) for i, g in enumerate(gradients)]
    limit = c.real("max_grad_norm", max_grad_norm, 0.0)
    if not limit > 0 or not math.isfinite(limit):
        c.fail("max_grad_norm", "a finite number > 0", max_grad_norm)
    t = max((g.type.dtype for g in grads), key=lambda d: WIDTH[d])
    acc = ACC[t]
    norms = []
    for g in grads:
        w = _to(g, ACC[g.type.dtype])  # exact widening
        n = _to(B.sqrt(_sum_all(B.mul(w, w))), g.type.dtype)
        norms.append(B.reshape(_to(n, t), (1,)))  # torch.stack promotes to the widest
    v = _to(B.join(norms, 0), acc)
    total = _to(B.sqrt(_sum_all(B.mul(v, v))), t)
    coef = B.mul(B.div(const(1.0, t), B.add(total, const(1e-6, t))), const(limit, t))
    one = const(1.0, t)
    coef = B.where(B.greater(coef, one), one, coef)  # clamp(max=1): NaN stays NaN
    return [B.mul(g, _to(coef, g.type.dtype)) for g in grads]


def _sum_all(v: Value) -> Value:
    return B.reduce_sum(v) if v.type.rank else v


__all__: list[Any] = ["sgd", "adam", "adamw", "scheduled_learning_rate", "clip_grad_norm",
                      "SCHEDULES"]
