"""Element-wise ops and fused element-wise groups: a thread per element, grid-stride.

The expressions are the C target's (``gradc.backends.c.scalar``, through ``ExprGen``) in the CUDA
dialect (``scalar.py``: x86's NaN results): each element's operands are loaded into locals, the
group's ops computed in registers, and every output stored; a broadcast operand is indexed by
coordinates of the element (``FlatCtx``). Loads of an element precede its stores in the same thread
and no thread reads another's element, so an output may overwrite an operand of its shape (the
plan's take-over and in-place updates).
"""

from __future__ import annotations

from gradc.backends.c.kernel import FlatCtx
from gradc.backends.c.scalar import SCALAR, ExprGen, needed_inputs

from gradc.backends.cuda.kernel import CudaKernel, static_shape


def emit_elementwise(k: CudaKernel) -> None:
    """One grid-stride loop over the group's shape computing every output."""
    n = k.node
    inputs = list(n.inputs if n.body is None else n.body.inputs)
    outputs = list(n.outputs if n.body is None else n.body.outputs)
    shape = outputs[0].type.shape
    total = 1
    for s in static_shape(k, shape):
        total *= s
    used = needed_inputs(outputs, set(inputs))
    with k.each(total) as i:
        ctx = FlatCtx(k.dims, shape, i, "c")
        gen = ExprGen({v: (k.ptr[v], ctx.offset) for v in used}, read=k.read, table=k.scalar)
        ctx.gen = gen
        values = [gen.get(o) for o in outputs]
        k.code.line(*gen.lines, *(f"{k.param(o)}[{i}] = {e};" for o, e in zip(outputs, values)))


EMITTERS = {op: emit_elementwise for op in SCALAR}
