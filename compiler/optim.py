"""``gradc.optim``: the optimizers a training step applies (docs/training.md, "The optimizers").

Each class holds hyperparameters only, checked when it is made, and knows how to write its update
of one parameter into a graph with the composites of ``gradc.ops`` (``sgd``, ``adam``,
``adamw``): the algorithms of ``torch.optim``'s classes of the same names. ``state`` names the
optimizer state a parameter carries between steps; ``gradc.training_step`` makes it parameters
named ``<param>.<state>``, initialized to zeros.

``schedule=`` takes ``WarmupLinear`` or ``WarmupCosine`` (transformers' schedules of the same
shape; docs/training.md, "Learning-rate schedules"): the learning rate of update ``k`` is
``lr * factor(k - 1)``, computed inside the step graph from its ``step`` input, so an exported
ONNX step and a resumed Trainer carry the schedule too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.core import Value
from gradc.ir.optimizers import adam, adamw, scheduled_learning_rate, sgd


def _number(cls: str, field: str, v: Any, lo: float = 0.0, hi: float = math.inf,
            hi_open: bool = False) -> float:
    """A real number in [lo, hi] (or [lo, hi)), else a VerifyError naming the field."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise VerifyError(f"{cls}: {field}: expected a real number, got {v!r}")
    f = float(v)
    if not math.isfinite(f) or f < lo or f > hi or (hi_open and f >= hi):
        bound = f"[{lo:g}, {hi:g})" if hi_open else f"[{lo:g}, {hi:g}]"
        raise VerifyError(f"{cls}: {field}: expected a finite number in {bound}, got {v!r}")
    return f


def _steps(cls: str, field: str, v: Any, least: int) -> int:
    """An int >= least (a Python or NumPy int, not a bool or a float)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < least:
        raise VerifyError(f"{cls}: {field}: expected an int >= {least}, got {v!r}")
    return int(v)


@dataclass(frozen=True)
class _Warmup:
    """A learning-rate factor with a linear warmup over ``warmup_steps`` updates, then a decay
    that reaches 0 at ``total_steps``; ``t`` counts the earlier updates (``step - 1``)."""

    warmup_steps: int
    total_steps: int

    kind = ""

    def __post_init__(self) -> None:
        name = type(self).__name__
        w = _steps(name, "warmup_steps", self.warmup_steps, 0)
        t = _steps(name, "total_steps", self.total_steps, 1)
        if t < w:  # transformers accepts it; almost surely a slip (SPEC-transformers §29.3)
            raise VerifyError(f"{name}: total_steps: expected at least warmup_steps ({w}), "
                              f"got {t}")
        if t >= 2 ** 53:
            raise VerifyError(f"{name}: total_steps: expected an int below 2**53, got {t}")
        object.__setattr__(self, "warmup_steps", w)
        object.__setattr__(self, "total_steps", t)

    def factor(self, t: int) -> float:
        """The factor after ``t`` earlier updates, in Python (transformers' lambda)."""
        w, n = self.warmup_steps, self.total_steps
        if t < w:
            return float(t) / float(max(1, w))
        if self.kind == "warmup_linear":
            return max(0.0, float(n - t) / float(max(1, n - w)))
        progress = float(t - w) / float(max(1, n - w))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))


@dataclass(frozen=True)
class WarmupLinear(_Warmup):
    """transformers' ``get_linear_schedule_with_warmup``: the factor rises linearly from 0 over
    ``warmup_steps`` updates, then falls linearly to 0 at ``total_steps`` (and stays 0)."""

    kind = "warmup_linear"


@dataclass(frozen=True)
class WarmupCosine(_Warmup):
    """transformers' ``get_cosine_schedule_with_warmup`` (half a cosine): the factor rises
    linearly over ``warmup_steps`` updates, then follows ``0.5 * (1 + cos(pi * progress))``,
    reaching 0 at ``total_steps`` (and rising again after, as transformers' does)."""

    kind = "warmup_cosine"


Schedule = WarmupLinear | WarmupCosine


def _check_schedule(cls: str, v: Any) -> None:
    if v is not None and not isinstance(v, (WarmupLinear, WarmupCosine)):
        raise VerifyError(f"{cls}: schedule: expected None, gradc.optim.WarmupLinear or "
                          f"WarmupCosine, got {type(v).__name__}")


class _Scheduled:
    """The learning rate of a step: the number ``lr``, or ``lr * factor`` in the graph."""

    lr: float
    schedule: Schedule | None

    def learning_rate(self, step: Value) -> float | Value:
        """``lr``, or the scheduled rank-0 float64 ``lr_t`` computed from ``step``."""
        if self.schedule is None:
            return self.lr
        s = self.schedule
        return scheduled_learning_rate(step, self.lr, s.kind, s.warmup_steps, s.total_steps)


@dataclass(frozen=True)
class SGD(_Scheduled):
    """``torch.optim.SGD``: momentum, dampening, weight decay and Nesterov momentum."""

    lr: float
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        for f in ("lr", "momentum", "dampening", "weight_decay"):
            _number("SGD", f, getattr(self, f))
        _check_schedule("SGD", self.schedule)
        if not isinstance(self.nesterov, bool):
            raise VerifyError(f"SGD: nesterov: expected a bool, got {self.nesterov!r}")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise VerifyError("SGD: nesterov: needs momentum > 0 and dampening 0 "
                              "(PyTorch's rule)")

    @property
    def state(self) -> tuple[str, ...]:
        """The state of each parameter: a momentum buffer when momentum is not 0."""
        return ("momentum_buffer",) if self.momentum else ()

    def update(self, p: Value, g: Value, state: Mapping[str, Value], step: Value,
               lr: float | Value | None = None) -> tuple[Value, dict[str, Value]]:
        """The parameter's next value and its next state (``lr``: ``learning_rate(step)``,
        computed once for every parameter)."""
        new_p, buf = sgd(p, g, self.learning_rate(step) if lr is None else lr,
                         momentum_buffer=state.get("momentum_buffer"),
                         training_step=step, momentum=self.momentum, dampening=self.dampening,
                         weight_decay=self.weight_decay, nesterov=self.nesterov)
        return new_p, ({"momentum_buffer": buf} if buf is not None else {})


@dataclass(frozen=True)
class Adam(_Scheduled):
    """``torch.optim.Adam`` (weight decay as an L2 term added to the gradient)."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    schedule: Schedule | None = None

    kind = "adam"

    def __post_init__(self) -> None:
        name = type(self).__name__
        _check_schedule(name, self.schedule)
        _number(name, "lr", self.lr)
        _number(name, "eps", self.eps)
        _number(name, "weight_decay", self.weight_decay)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise VerifyError(f"{name}: betas: expected two numbers, got {self.betas!r}")
        for i, b in enumerate(self.betas):
            _number(name, f"betas[{i}]", b, 0.0, 1.0, hi_open=True)
        object.__setattr__(self, "betas", (float(self.betas[0]), float(self.betas[1])))

    @property
    def state(self) -> tuple[str, ...]:
        """The first and second moment of each parameter."""
        return ("exp_avg", "exp_avg_sq")

    def update(self, p: Value, g: Value, state: Mapping[str, Value], step: Value,
               lr: float | Value | None = None) -> tuple[Value, dict[str, Value]]:
        """The parameter's next value and its next moments (``lr`` as SGD's)."""
        self._check_eps(p)
        fn = adamw if self.kind == "adamw" else adam
        new_p, m, v = fn(p, state["exp_avg"], state["exp_avg_sq"], g, step,
                         self.learning_rate(step) if lr is None else lr,
                         beta1=self.betas[0], beta2=self.betas[1], epsilon=self.eps,
                         weight_decay=self.weight_decay)
        return new_p, {"exp_avg": m, "exp_avg_sq": v}

    def _check_eps(self, p: Value) -> None:
        """A positive ``eps`` that the parameter's dtype rounds to 0 (1e-8 in float16) is
        refused: the step would divide by ``sqrt(v) + 0``, and ``v`` underflows to 0 for any
        small gradient in float16, so the loss turns NaN a step later with no hint why."""
        dt = p.type.dtype.numpy
        if self.eps > 0 and float(np.asarray(self.eps, np.float32).astype(dt)) == 0:
            tiny = float(np.finfo(dt).smallest_subnormal)
            raise VerifyError(f"{type(self).__name__}: eps: {self.eps:g} rounds to 0 in "
                              f"{p.type.dtype}, the dtype of parameter {p.name!r} (the update "
                              f"divides by sqrt(v) + eps, and v underflows to 0 for small "
                              f"gradients: the loss would become NaN); expected an eps that "
                              f"{p.type.dtype} holds (at least {tiny:.3g}; 1e-4 is usual for "
                              f"float16 training)")


@dataclass(frozen=True)
class AdamW(Adam):
    """``torch.optim.AdamW`` (decoupled weight decay)."""

    weight_decay: float = 0.01

    kind = "adamw"


Optimizer = SGD | Adam | AdamW

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "WarmupLinear", "WarmupCosine", "Schedule"]
