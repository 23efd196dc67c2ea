"""``gradc.optim``: the optimizers a training step applies (SPEC-training.md §19).

Each class holds hyperparameters only, checked when it is made, and knows how to write its update
of one parameter into a graph with the composites of ``gradc.ops`` (``sgd``, ``adam``,
``adamw``): the algorithms of ``torch.optim``'s classes of the same names. ``state`` names the
optimizer state a parameter carries between steps; ``gradc.training_step`` makes it parameters
named ``<param>.<state>``, initialized to zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from gradc.errors import VerifyError
from gradc.ir.core import Value
from gradc.ir.optimizers import adam, adamw, sgd


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


@dataclass(frozen=True)
class SGD:
    """``torch.optim.SGD``: momentum, dampening, weight decay and Nesterov momentum."""

    lr: float
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        for f in ("lr", "momentum", "dampening", "weight_decay"):
            _number("SGD", f, getattr(self, f))
        if not isinstance(self.nesterov, bool):
            raise VerifyError(f"SGD: nesterov: expected a bool, got {self.nesterov!r}")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise VerifyError("SGD: nesterov: needs momentum > 0 and dampening 0 "
                              "(PyTorch's rule)")

    @property
    def state(self) -> tuple[str, ...]:
        """The state of each parameter: a momentum buffer when momentum is not 0."""
        return ("momentum_buffer",) if self.momentum else ()

    def update(self, p: Value, g: Value, state: Mapping[str, Value], step: Value
               ) -> tuple[Value, dict[str, Value]]:
        """The parameter's next value and its next state."""
        new_p, buf = sgd(p, g, self.lr, momentum_buffer=state.get("momentum_buffer"),
                         training_step=step, momentum=self.momentum, dampening=self.dampening,
                         weight_decay=self.weight_decay, nesterov=self.nesterov)
        return new_p, ({"momentum_buffer": buf} if buf is not None else {})


@dataclass(frozen=True)
class Adam:
    """``torch.optim.Adam`` (weight decay as an L2 term added to the gradient)."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0

    kind = "adam"

    def __post_init__(self) -> None:
        name = type(self).__name__
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

    def update(self, p: Value, g: Value, state: Mapping[str, Value], step: Value
               ) -> tuple[Value, dict[str, Value]]:
        """The parameter's next value and its next moments."""
        fn = adamw if self.kind == "adamw" else adam
        new_p, m, v = fn(p, state["exp_avg"], state["exp_avg_sq"], g, step, self.lr,
                         beta1=self.betas[0], beta2=self.betas[1], epsilon=self.eps,
                         weight_decay=self.weight_decay)
        return new_p, {"exp_avg": m, "exp_avg_sq": v}


@dataclass(frozen=True)
class AdamW(Adam):
    """``torch.optim.AdamW`` (decoupled weight decay)."""

    weight_decay: float = 0.01

    kind = "adamw"


Optimizer = SGD | Adam | AdamW

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]
