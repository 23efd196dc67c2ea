"""ONNX converters of SPEC-training.md §21 for §12: BatchNormalization.

- Opsets 9, 14, 15 with ``training_mode=0`` (opsets 9-13 have no such attribute):
  ``batch_normalization(X, mean, var, scale, B, epsilon)``; ``momentum`` is unused.
- Opsets 14, 15 with ``training_mode=1``: ``batch_normalization_training(X, scale, B,
  epsilon)``; the outputs ``running_mean`` and ``running_var`` are §12.5's composition with
  ``f = 1`` (ONNX's biased batch variance) and ONNX's ``momentum`` (default 0.9).
  **Choice** (gradc's state-update convention, docs/training.md): when the running
  statistics are parameters (initializers), their updated values also become graph outputs
  named ``<parameter>.next`` (``finish_running_statistics``), whether or not the ONNX node names
  its outputs 1-2: PyTorch's training-mode export names them but leaves them dangling, and a
  training step (``gradc.training_step``) needs them. ``gradc.grad`` gives such outputs no
  cotangent. A running statistic read by two training-mode nodes keeps the first update.
- Before opset 9 (``spatial``, ``is_test``, five outputs): UnsupportedError. So are the
  training statistics of opsets 9-13 (outputs 1-4) and outputs 1-2 with ``training_mode=0``.

ONNX's ``(C,)`` parameter vectors become ``(1, C, 1, ...)`` with ``reshape``, and the running
statistics go back to ``(C,)``.
"""

from __future__ import annotations

from typing import Any

from gradc.backends.onnx.import_node import (Context, OnnxNode, Produced, converter,
                                             require_dtype, require_rank)
from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.core import Parameter, Value
from gradc.ir.ops.batch_norm import running_statistics
from gradc.ir.ops.common import F

FIELDS = ("X", "scale", "B", "input_mean", "input_var")


def _training(n: OnnxNode, ctx: Context) -> bool:
    mode = n.get_int("training_mode", 0) if ctx.opset >= 14 else 0
    if mode not in (0, 1):
        raise VerifyError(f"attribute training_mode: expected 0 or 1, got {mode}")
    return mode == 1


def _check(n: OnnxNode, ctx: Context) -> list[str]:
    """Forms this importer refuses (reported before anything is built)."""
    if ctx.opset < 9:
        return [f"opset {ctx.opset}: BatchNormalization before opset 9 (attributes spatial, "
                "is_test, five outputs) is not supported"]
    extra = [i for i in range(1, len(n.outputs)) if n.output(i)]
    if _training(n, ctx):
        if any(i > 2 for i in extra):
            return ["outputs: expected at most Y, running_mean, running_var"]
        return []
    if extra:
        what = "attribute training_mode: outputs 1-2 need training_mode=1" if ctx.opset >= 14 \
            else f"outputs {extra}: the training statistics of opsets 9-13 (attribute " \
                 "training_mode of opset 14) are not supported"
        return [what]
    return []


def _float(n: OnnxNode, name: str, default: float) -> float:
    v = n.get_float(name, default)
    return default if v is None else v


def _param(v: Value, field: str, x: Value) -> Value:
    """A ``(C,)`` vector as ``(1, C, 1, ...)`` of X's rank."""
    if v.type.dtype != x.type.dtype:
        raise UnsupportedError(f"input {field}: dtype {v.type.dtype} differs from X's "
                               f"{x.type.dtype} (gradc batch normalization takes one dtype)")
    if v.type.rank != 1 or v.type.shape[0] != x.type.shape[1]:
        raise VerifyError(f"input {field}: expected shape ({x.type.shape[1]},) (X's channels), "
                          f"got {tuple(v.type.shape)}")
    return ops.reshape(v, (1, v.type.shape[0]) + (1,) * (x.type.rank - 2))


@converter("BatchNormalization", check=_check)
def _batch_normalization(n: OnnxNode, ctx: Context) -> list[Produced]:
    """§21: inference or training mode (module docstring)."""
    x = ctx.value(n, 0, "X")
    require_rank(x, 2, 8, "X", "batch_normalization")
    require_dtype(x, F, "X", "batch_normalization")
    eps = _float(n, "epsilon", 1e-5)
    scale, bias = (_param(ctx.value(n, i, f), f, x) for i, f in ((1, "scale"), (2, "B")))
    if not _training(n, ctx):
        mean, var = (_param(ctx.value(n, i, f), f, x) for i, f in ((3, "input_mean"),
                                                                  (4, "input_var")))
        return [ops.batch_normalization(x, mean, var, scale, bias, epsilon=eps)]
    y, bm, bv = ops.batch_normalization_training(x, scale, bias, epsilon=eps)
    params = [s for s in (n.input(3), n.input(4))
              if s and ctx.is_const(s) and not ctx.is_fixed(s)]  # initializers: parameters
    if not (n.output(1) or n.output(2) or params):
        return [y]
    old_mean, old_var = ctx.value(n, 3, "input_mean"), ctx.value(n, 4, "input_var")
    rm, rv = running_statistics(x, bm, bv, _param(old_mean, "input_mean", x),
                                _param(old_var, "input_var", x),
                                _float(n, "momentum", 0.9))
    shape = old_mean.type.shape
    rm, rv = ops.reshape(rm, shape), ops.reshape(rv, shape)
    updates: dict[str, Value] = getattr(ctx, STATE_UPDATES, None) or {}
    setattr(ctx, STATE_UPDATES, updates)
    for old, new in ((old_mean, rm), (old_var, rv)):
        if isinstance(old, Parameter):
            updates.setdefault(old.name, new)
    return [y, rm if n.output(1) else None, rv if n.output(2) else None]


STATE_UPDATES = "gradc_state_updates"  # the importer's attribute: parameter name -> next value


def finish_running_statistics(ctx: Any) -> None:
    """After the graph outputs: output each running statistic's update as ``<name>.next``
    (the module docstring); a name already taken is left alone."""
    for name, v in (getattr(ctx, STATE_UPDATES, None) or {}).items():
        out = f"{name}.next"
        if not ctx.graph.uses_name(out) and out not in getattr(ctx, "reserved", set()):
            ctx.graph.output(v, out)
