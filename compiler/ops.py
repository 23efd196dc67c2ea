"""``gradc.ops``: the operator builders, one per registered op (see ``gradc.ir.builders``)."""

from __future__ import annotations

from typing import Any, Callable

from gradc.ir import builders as _builders
from gradc.ir.ops.registry import REGISTRY, OpDef, get_op
from gradc.ir.optimizers import adam, adamw, sgd  # composites (SPEC-training §9.6)
from gradc.ir.dropout import dropout
from gradc.ir.losses import mean_squared_error, negative_log_likelihood, softmax_cross_entropy

__all__ = [*_builders.__all__, "REGISTRY", "OpDef", "get_op"]
__all__ += ["adam", "adamw", "sgd", "dropout", "mean_squared_error",  # training composites
            "negative_log_likelihood", "softmax_cross_entropy"]


def __getattr__(name: str) -> Callable[..., Any]:
    """``gradc.ops.relu`` and ``from gradc.ops import relu`` (PEP 562)."""
    return _builders.__getattr__(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_builders.__all__))
