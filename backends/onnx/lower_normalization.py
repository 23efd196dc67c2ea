"""ONNX lowerings of SPEC-transformers.md §24 and §26: normalization, gather, gather_grad.

``mean_variance_normalization`` is ONNX LayerNormalization-17's function body, op by op
(``ReduceMean``, ``Sub``, ``Mul``, ``ReduceMean``, ``Add``, ``Sqrt``, ``Div``, ``Mul``; then
``Mul`` by the scale and ``Add`` of the bias), never a com.microsoft operator; its gradient adds
``ReduceSum``. float16 goes through a ``Cast`` to float32 and is rounded once at the end. The
element-wise steps keep the reference's order; the sums follow onnxruntime's order and are held
to §24.4's bound.

``gather`` is ``Gather`` (a copy: exact). ``gather_grad`` is ``ScatterND`` with
``reduction="add"`` into ``ConstantOfShape(0)``: the axis moved first by ``Transpose``, the
indices normalized (a negative one counts from the end; one still negative after that becomes
``size``, so that onnxruntime refuses it rather than counting it from the end again) and shaped
``(count, 1)``. ONNX leaves the order of duplicate updates open: §9.5's bound, not bits.
onnxruntime refuses out-of-range indices in both; ``index_error`` then finds the first bad
index for §26.3's message.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.errors import InputError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.interpret import evaluate_node
from gradc.ir.ops.gather import check_node_indices
from gradc.ir.ops.registry import get_op
from gradc.ir.types import Dim, DType


class _Mvn:
    """The work dtype, the normalized axes and the statistics of one node's lowering."""

    def __init__(self, gb: OnnxGraphBuilder, node: Node) -> None:
        self.gb = gb
        self.dtype = node.inputs[0].type.dtype
        self.work = DType.float32 if self.dtype == DType.float16 else self.dtype
        self.axes = list(node.attrs["axes"])
        self.attrs = node.attrs
        shape = node.inputs[0].type.shape
        self.kshape = tuple(1 if a in self.axes else d for a, d in enumerate(shape))

    def w(self, t: Tensor) -> Tensor:
        """``t`` in the work dtype."""
        return self.gb.cast(t, self.work)

    def mean(self, t: Tensor) -> Tensor:
        """``ReduceMean`` over the normalized axes, keepdims."""
        return self.gb.op("ReduceMean", [t, self.gb.ints(self.axes)], t.dtype, self.kshape,
                          keepdims=1)

    def z(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """The body's normalized value and ``InvStdDev`` (None without ``use_variance``)."""
        gb = self.gb
        d = gb.binary("Sub", x, self.mean(x)) if self.attrs["use_mean"] else x
        if not self.attrs["use_variance"]:
            return d, None
        var = self.mean(gb.binary("Mul", d, d))
        se = gb.binary("Add", var, gb.scalar(self.attrs["epsilon"], self.work))
        sd = gb.op("Sqrt", [se], self.work, se.shape)
        inv = gb.binary("Div", gb.scalar(1.0, self.work), sd)
        return gb.binary("Mul", d, inv), inv


def lower_mean_variance_normalization(gb: OnnxGraphBuilder, node: Node,
                                      args: Sequence[Tensor]) -> list[Tensor]:
    """z * scale + bias, with LayerNormalization-17's body for z."""
    M = _Mvn(gb, node)
    y, _ = M.z(M.w(args[0]))
    if len(args) > 1:
        y = gb.binary("Mul", y, M.w(args[1]))
    if len(args) > 2:
        y = gb.binary("Add", y, M.w(args[2]))
    return [gb.cast(y, M.dtype)]


def _parameter_sum(gb: OnnxGraphBuilder, t: Tensor, pshape: Sequence[Dim]) -> Tensor:
    """``t`` summed over the axes where a parameter of ``pshape`` broadcasts, then reshaped."""
    lead = t.rank - len(pshape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(pshape)
                                if d == 1 and t.shape[lead + i] != 1]
    if axes:
        kept = tuple(1 if a in axes else d for a, d in enumerate(t.shape))
        t = gb.op("ReduceSum", [t, gb.ints(axes)], t.dtype, kept, keepdims=1)
    return gb.reshape(t, pshape)


def lower_mean_variance_normalization_grad(gb: OnnxGraphBuilder, node: Node,
                                           args: Sequence[Tensor]) -> list[Tensor]:
    """dX = inv * ((g - mean(g)) - z * mean(g * z)), g = dY * scale; dscale = sum(dY * z),
    dbias = sum(dY) over the scale's broadcast axes."""
    M = _Mvn(gb, node)
    x, dy, scale = (M.w(t) for t in args)
    z, inv = M.z(x)
    g = gb.binary("Mul", dy, scale)
    r = gb.binary("Sub", g, M.mean(g)) if M.attrs["use_mean"] else g
    if inv is not None:
        mgz = M.mean(gb.binary("Mul", g, z))
        r = gb.binary("Mul", inv, gb.binary("Sub", r, gb.binary("Mul", z, mgz)))
    pshape = node.inputs[2].type.shape
    ds = _parameter_sum(gb, gb.binary("Mul", dy, z), pshape)
    db = _parameter_sum(gb, dy, pshape)
    return [gb.cast(r, M.dtype), gb.cast(ds, M.dtype), gb.cast(db, M.dtype)]


def lower_gather(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Gather(input, indices, axis)``: a copy."""
    out = node.outputs[0].type
    return [gb.op("Gather", list(args), out.dtype, out.shape, axis=node.attrs["axis"])]


def lower_gather_grad(gb: OnnxGraphBuilder, node: Node,
                      args: Sequence[Tensor]) -> list[Tensor]:
    """``ScatterND(zeros, indices, slices, reduction="add")`` with the axis moved first."""
    dy, idx = args
    axis, out = node.attrs["axis"], tuple(node.attrs["output_sizes"])
    dtype = node.outputs[0].type.dtype
    work = DType.float32 if dtype == DType.float16 else dtype
    r = len(out)
    i64 = DType.int64
    size = gb.scalar_dim(out[axis])
    k = gb.cast(idx, i64)
    neg = gb.compare("Less", k, gb.scalar(0, i64))
    k = gb.op("Where", [neg, gb.binary("Add", k, size), k], i64, k.shape)
    still = gb.compare("Less", k, gb.scalar(0, i64))  # below -size: out of range, refused
    k = gb.op("Where", [still, size, k], i64, k.shape)
    k = gb.op("Reshape", [k, gb.ints([-1, 1])], i64, ("count", 1))
    rest = out[:axis] + out[axis + 1:]
    slices = gb.op("Reshape", [gb.cast(dy, work), gb.shape_tensor(out[:axis] + (-1,)
                                                                    + out[axis + 1:])],
                   work, out[:axis] + ("count",) + out[axis + 1:])
    perm = [axis] + [a for a in range(r) if a != axis]
    if axis:
        slices = gb.op("Transpose", [slices], work, ("count",) + rest, perm=perm)
    zeros = gb.filled(gb.shape_tensor((out[axis],) + rest), 0, work, (out[axis],) + rest)
    acc = gb.op("ScatterND", [zeros, k, slices], work, (out[axis],) + rest, reduction="add")
    if axis:
        acc = gb.op("Transpose", [acc], work, out, perm=list(np.argsort(perm)))
    return [gb.cast(acc, dtype)]


def index_error(graph: Graph, arrays: Mapping[str, np.ndarray],
                bindings: Mapping[str, int]) -> str | None:
    """§26.3's message for the first node that checks its indices when run (gather,
    gather_grad: ``raises_input_error``; never fused) whose indices are out of range, in graph
    order, or None: the values their indices depend on are computed by the reference from the
    call's arrays."""
    checked = [n for n in graph.nodes if n.op != "constant" and n.body is None
               and get_op(n.op).raises_input_error]
    needed = _ancestors([n.inputs[1] for n in checked])
    env: dict[Value, Any] = {v: arrays[v.name] for v in graph.inputs if v.name in arrays}
    try:
        for n in graph.nodes:
            if n in checked:
                check_node_indices(n, np.asarray(env[n.inputs[1]]), bindings)
            if n in needed:
                outs = evaluate_node(n, [env[u] for u in n.inputs], bindings)
                env.update(zip(n.outputs, outs))
    except InputError as e:
        return str(e)
    except (KeyError, ValueError, TypeError):  # a value this search cannot compute
        return None
    return None


def _ancestors(values: list[Value]) -> set[Node]:
    """The nodes that ``values`` depend on."""
    need: set[Node] = set()
    todo = [v.producer for v in values if v.producer is not None]
    while todo:
        n = todo.pop()
        if n in need:
            continue
        need.add(n)
        todo.extend(u.producer for u in n.inputs if u.producer is not None)
    return need


def lower_normalization_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {
        "mean_variance_normalization": lower_mean_variance_normalization,
        "mean_variance_normalization_grad": lower_mean_variance_normalization_grad,
        "gather": lower_gather, "gather_grad": lower_gather_grad,
    }
