"""Groups of a C step's kernels for profiles: what a kernel computes, from its profile label.

A label (``gradc.backends.c.emit.kernel_label``) names registry ops only: the op, or a fused
group's kind and member ops, then the result's dtype and shape. ``group_of`` reads them in a
fixed order, the first match deciding: attention (the C target's fused attention groups, forward
and backward: their products included), products (``gemm``, and a gemm's fused epilogues and
reductions), the loss (cross-entropy's ``log_softmax`` and
``one_hot``, and the kernels over the logits' shape that its gradient fuses), softmax, layer
norm (``mean_variance_normalization`` and its gradient), GELU (``gelu`` or the ``erf`` of its
exact expansion), embedding (``gather`` and ``gather_grad``), the optimizer (the fused update,
the only kernels with a ``sqrt``), data movement (transpose, split, join, copies) and other.
"""

from __future__ import annotations

from typing import Any, Sequence

GROUPS = ("attention", "products", "loss", "softmax", "layer norm", "GELU", "embedding",
          "optimizer", "movement", "other")
MOVEMENT = ("transpose", "split", "join", "slice", "reshape", "expand", "pad")


def _ops(label: str) -> tuple[str, list[str]]:
    """(the kernel's kind or op, its member ops) of a profile label."""
    what = label.split(" -> ")[0]
    if what.startswith("fused "):
        kind = what.split()[1]
        inner = what[what.find("(") + 1:what.rfind(")")] if "(" in what else ""
        return kind, [o.strip() for o in inner.split(",") if o.strip()]
    op = what.split()[0]
    return op, [op]


def _over_logits(label: str, logits_shape: str | None) -> bool:
    """True when a kernel's result has the logits' shape, or their shape without the class
    axis (kept or not): the per-token sums of the loss and of its gradient."""
    if logits_shape is None:
        return False
    rows = logits_shape.rsplit("x", 1)[0]
    return any(label.endswith(f"[{s}]") for s in (logits_shape, rows, rows + "x1"))


def group_of(label: str, logits_shape: str | None = None) -> str:
    """The group of one kernel (module docstring); ``logits_shape`` (``"8x128x4096"``) marks
    the loss's kernels over the logits."""
    kind, ops = _ops(label)
    if kind.startswith("attention"):  # the C target's attention groups, forward and backward
        return "attention"
    if "gemm" in ops or kind == "gemm":
        return "products"
    if "log_softmax" in ops or "one_hot" in ops or _over_logits(label, logits_shape):
        return "loss"
    if "softmax" in ops:
        return "softmax"
    if any(o.startswith("mean_variance_normalization") for o in ops):
        return "layer norm"
    if any(o in ("gelu", "gelu_grad", "erf") for o in ops):
        return "GELU"
    if any(o.startswith("gather") for o in ops):
        return "embedding"
    if "sqrt" in ops:
        return "optimizer"
    if all(o in MOVEMENT for o in ops):
        return "movement"
    return "other"


def group_table(kernels: Sequence[dict[str, Any]], steps: int, wall: float,
                logits_shape: str | None = None) -> list[str]:
    """Markdown: ms per step, % of the step's wall time and the kernel count of each group."""
    seconds = {g: 0.0 for g in GROUPS}
    count = {g: 0 for g in GROUPS}
    for k in kernels:
        g = group_of(k["what"], logits_shape)
        seconds[g] += k["seconds"] / steps
        count[g] += 1
    total = sum(seconds.values())
    lines = ["| group | ms/step | % of step | kernels |", "|---|---:|---:|---:|"]
    for g in GROUPS:
        if count[g]:
            lines.append(f"| {g} | {1e3 * seconds[g]:.2f} | {100 * seconds[g] / wall:.1f} | "
                         f"{count[g]} |")
    lines.append(f"| all kernels | {1e3 * total:.2f} | {100 * total / wall:.1f} | "
                 f"{sum(count.values())} |")
    return lines
