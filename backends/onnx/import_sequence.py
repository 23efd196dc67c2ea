"""``SplitToSequence`` read by ``SequenceAt``: the parts as ``Split`` or ``Slice`` nodes.

PyTorch's dynamo exporter writes ``torch.split`` and ``chunk`` as ``SplitToSequence`` followed
by one ``SequenceAt`` per part; its optimizer (``optimize=True``) turns that into ``Split``, but
the optimizer also folds weights into new initializers, which a training export must avoid
(docs/transformers.md). gradc has no sequence type, so ``import_rewrite.prepare`` replaces a
``SplitToSequence`` whose every reader is a ``SequenceAt`` at a known position (and that is no
graph output) by the parts those readers take:

- when the split axis has a known static size (the model's ``value_info``, or shape
  inference), one ``Split`` with the parts' sizes, each ``SequenceAt`` an ``Identity`` of its
  part (negative positions count from the end);
- otherwise one ``Slice`` per reader, ``[k·s, (k+1)·s)`` for a scalar ``split`` ``s`` (Slice
  clamps the last part at the axis's end, as SplitToSequence does), the running sums for a
  vector ``split``, ``[k, k+1)`` without ``split``; a negative position needs the size and
  leaves the node in place.

Without ``split``, ``keepdims=0`` removes the axis from each part (``Squeeze``). Whatever is
left is refused, naming why (``REFUSED``).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, helper

from gradc.backends.onnx.import_rewrite import Rewriter, rewrite
from gradc.backends.onnx.import_select import REFUSED

_PARTS = "sequences"  # Rewriter.scratch key: sequence name -> its parts (a _Parts)
MAX_PARTS = 4096  # a Split of more parts than this is never written (the readers slice)


class _Parts:
    """How to take part ``k`` of one rewritten SplitToSequence."""

    def __init__(self, node: NodeProto, axis: int, sizes: list[int] | None,
                 step: int | None, keepdims: bool) -> None:
        self.node, self.axis, self.sizes, self.step = node, axis, sizes, step
        self.keepdims = keepdims  # False: squeeze the axis (no split input, keepdims=0)
        self.outputs: list[str] = []  # the Split's outputs, when sizes are known

    def count(self) -> int | None:
        return None if self.sizes is None else len(self.sizes)

    def bounds(self, k: int) -> tuple[int, int]:
        if self.sizes is not None:
            start = int(sum(self.sizes[:k]))
            return start, start + self.sizes[k]
        step = self.step or 1
        return k * step, (k + 1) * step


def _position(node: NodeProto, r: Rewriter) -> int | None:
    if node.op_type != "SequenceAt" or len(node.input) < 2:
        return None
    a = r.constant(node.input[1])
    if a is None or np.asarray(a).size != 1 or np.asarray(a).dtype.kind not in "iu":
        return None
    return int(np.asarray(a).reshape(-1)[0])


def _axis_size(name: str, axis: int, r: Rewriter) -> tuple[int, int | None] | None:
    """(normalized axis, its static size or None); None when the rank is unknown."""
    t = r.type_of(name)
    if t is None or not t.tensor_type.HasField("shape"):
        return None
    dims = t.tensor_type.shape.dim
    if not -len(dims) <= axis < len(dims):
        return None
    d = dims[axis % len(dims)]
    return axis % len(dims), (int(d.dim_value) if d.HasField("dim_value") else None)


def _plan(n: NodeProto, r: Rewriter) -> _Parts | None:
    """The parts of a SplitToSequence that can be rewritten, else None."""
    seq = n.output[0] if n.output else ""
    readers = r.readers.get(seq, [])
    if not seq or seq in r.outputs or not readers:
        return None
    positions = [_position(x, r) for x in readers]
    if any(p is None for p in positions):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    axis_info = _axis_size(n.input[0], int(attrs.get("axis", 0)), r)
    if axis_info is None:
        return None
    axis, size = axis_info
    split = r.constant(n.input[1]) if len(n.input) > 1 and n.input[1] else None
    if len(n.input) > 1 and n.input[1] and split is None:
        return None  # a computed split
    keep = split is not None or bool(attrs.get("keepdims", 1))
    if size is not None and size > MAX_PARTS:
        size = None  # a stated size this large: each reader slices its part (no huge lists)
    if split is None:
        parts = _Parts(n, axis, [1] * size if size else None, None, keep)
    elif np.asarray(split).ndim == 0:
        s = int(split)
        if s < 1:
            return None  # the converter refuses it
        sizes = None
        if size and s > 0:
            sizes = [min(s, size - k * s) for k in range(-(-size // s))]
        parts = _Parts(n, axis, sizes, s, keep)
    else:
        parts = _Parts(n, axis, [int(v) for v in np.asarray(split).reshape(-1)], None, keep)
    count = parts.count()
    for p in positions:
        assert p is not None
        if count is None and p < 0 or count is not None and not -count <= p < count:
            return None  # the converter refuses the SequenceAt, naming the position
    return parts


@rewrite("SplitToSequence")
def _rewrite_split(n: NodeProto, r: Rewriter) -> list[NodeProto] | None:
    parts = _plan(n, r)
    if parts is None:
        return None
    r.scratch.setdefault(_PARTS, {})[n.output[0]] = parts
    if parts.sizes is None:
        return []  # each SequenceAt slices its part
    base = n.name or n.output[0]
    parts.outputs = [r.fresh(f"{n.output[0]}/part{k}") for k in range(len(parts.sizes))]
    sizes, name = r.const_node(f"{base}/sizes", parts.sizes)
    split = helper.make_node("Split", [n.input[0], name], list(parts.outputs), name=base,
                             axis=parts.axis)
    return [sizes, split]


@rewrite("SequenceAt")
def _rewrite_at(n: NodeProto, r: Rewriter) -> list[NodeProto] | None:
    parts = r.scratch.get(_PARTS, {}).get(n.input[0])
    if parts is None:
        return None
    k = _position(n, r)
    assert k is not None  # _plan checked every reader
    count = parts.count()
    if count is not None and k < 0:
        k += count
    base = n.name or n.output[0]
    if parts.outputs:
        src, nodes = parts.outputs[k], []
    else:
        start, end = parts.bounds(k)
        src = r.fresh(f"{n.output[0]}/slice") if not parts.keepdims else n.output[0]
        consts = [r.const_node(f"{base}/{f}", [v]) for f, v in
                  (("starts", start), ("ends", end), ("axes", parts.axis))]
        nodes = [c for c, _ in consts]
        nodes.append(helper.make_node("Slice", [parts.node.input[0]] + [c for _, c in consts],
                                      [src], name=base))
        if parts.keepdims:
            return nodes
    if not parts.keepdims:
        axes, name = r.const_node(f"{base}/axes", [parts.axis])
        return nodes + [axes, helper.make_node("Squeeze", [src, name], [n.output[0]],
                                               name=f"{base}/squeeze")]
    return nodes + [helper.make_node("Identity", [src], [n.output[0]], name=base)]


REFUSED.update({
    "SplitToSequence": "gradc has no sequence type; it imports a SplitToSequence whose every "
                       "reader is a SequenceAt at a known position, that is no graph output, "
                       "and whose split axis has a known rank (and a static size for a "
                       "negative position)",
    "SequenceAt": "gradc has no sequence type; it imports a SequenceAt only as a part of a "
                  "SplitToSequence at a known position",
})
