"""ONNX converters of SPEC-training.md §21 for §18-§20: Dropout, SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss.

- ``Dropout``: inference (opset < 12, or ``training_mode`` absent or a constant false) is the
  input itself, and the ``mask`` output a constant all-true bool (``expand`` of ``True``). With
  a constant true ``training_mode`` it is gradc's ``dropout`` composite with a constant
  ``ratio`` (default 0.5). **Choice** (§21): ONNX has no state input, so the first
  training-mode Dropout adds one graph input ``rng_state`` (uint32 ``(6,)``) and
  ``finish_rng_state`` one graph output ``rng_state_out`` (fresh names if those are taken); the
  dropouts consume the state in topological order, each passing its output state on. ONNX's
  ``seed`` attribute is ignored: the caller seeds through the key words of ``rng_state``.
- The losses map onto the composites of §18.2-§18.3; ``SoftmaxCrossEntropyLoss``'s second
  output is the composite's ``log_softmax`` value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradc.errors import VerifyError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.dropout import dropout
from gradc.ir.losses import negative_log_likelihood, softmax_cross_entropy_parts
from gradc.ir.ops.common import F
from gradc.ir.types import DType
from gradc.backends.onnx.import_node import Context, OnnxNode, Produced, converter, require_dtype

STATE = "gradc_rng_state"  # the importer's attribute holding the current dropout state
STATE_NAMES = ("rng_state", "rng_state_out")


def _fresh(ctx: Any, base: str) -> str:
    """``base``, or ``base_<k>``: a name no ONNX value and no gradc value of the graph has."""
    taken: set[str] = getattr(ctx, "reserved", set())
    name, k = base, 1
    while name in taken or ctx.graph.uses_name(name):
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _state(ctx: Any) -> Value:
    """The dropout state to consume next: the ``rng_state`` input at first."""
    cur = getattr(ctx, STATE, None)
    if cur is None:
        cur = ctx.graph.input(_fresh(ctx, STATE_NAMES[0]), "uint32", (6,))
        setattr(ctx, STATE, cur)
        setattr(ctx, STATE + "_input", cur)
    return cur


def finish_rng_state(ctx: Any) -> None:
    """After the nodes: output the last dropout's state as ``rng_state_out`` (if any)."""
    cur = getattr(ctx, STATE, None)
    if cur is not None and cur is not getattr(ctx, STATE + "_input", None):
        ctx.graph.output(cur, _fresh(ctx, STATE_NAMES[1]))


def _scalar(a: np.ndarray | None, field: str, default: Any) -> Any:
    if a is None:
        return default
    if a.size != 1:
        raise VerifyError(f"input {field}: expected a scalar, got shape {list(a.shape)}")
    return a.reshape(()).item()


@converter("Dropout", const_inputs=((1, "ratio"), (2, "training_mode")))
def _dropout(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    require_dtype(x, F, "data", "dropout")
    training, ratio = False, 0.5
    if ctx.opset >= 12:
        training = bool(_scalar(ctx.const(n, 2, "training_mode"), "training_mode", False))
        ratio = float(_scalar(ctx.const(n, 1, "ratio"), "ratio", 0.5))
    if not training:
        mask = ops.expand(ops.constant(np.array(True)), x) if n.output(1) else None
        return [x, mask]
    y, mask, state = dropout(x, _state(ctx), ratio)
    setattr(ctx, STATE, state)
    return [y, mask]


__all__ = ["finish_rng_state"]


def _loss_args(n: OnnxNode, ctx: Context, data: str, target: str,
               weight: str) -> tuple[Value, Value, Value | None, str, int | None]:
    x = ctx.value(n, 0, data)
    require_dtype(x, F, data, "the loss")
    labels = ctx.value(n, 1, target)
    require_dtype(labels, (DType.int32, DType.int64), target, "the loss")
    w = ctx.value(n, 2, weight) if n.input(2) else None
    ignore = n.get_int("ignore_index", 0) if n.has("ignore_index") else None
    return x, labels, w, n.get_str("reduction", "mean"), ignore


@converter("NegativeLogLikelihoodLoss")
def _nll(n: OnnxNode, ctx: Context) -> list[Produced]:
    x, labels, w, reduction, ignore = _loss_args(n, ctx, "input", "target", "weight")
    return [negative_log_likelihood(x, labels, w, reduction, ignore)]


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(n: OnnxNode, ctx: Context) -> list[Produced]:
    x, labels, w, reduction, ignore = _loss_args(n, ctx, "scores", "labels", "weights")
    loss, log_prob = softmax_cross_entropy_parts(x, labels, w, reduction, ignore)
    return [loss, log_prob if n.output(1) else None]
