"""NumPy emitter of SPEC-transformers.md §26.2 ``gather_grad``: a call of the copied reference
with the size of the indexed axis read from the arguments' shapes (``output_sizes[axis]`` may
be a symbol, which the module's attribute table cannot hold)."""

from __future__ import annotations

from gradc.backends.numpy.function import FunctionEmitter, Step
from gradc.backends.numpy.helpers import reference_helper


def emit_gather_grad(em: FunctionEmitter, step: Step) -> None:
    """``y = _gather_grad(attrs, dy, indices, <output_sizes[axis]>)[0]``."""
    node = step.node
    name = reference_helper("gather_grad")
    em.module.use(name)
    attrs = em.module.attrs(node.attrs)
    size = em.dim(node.attrs["output_sizes"][node.attrs["axis"]])
    args = ", ".join([attrs] + [em.var(v) for v in step.ins] + [size])
    y = em.fresh_array(node.outputs[0])
    em.emit(f"{y} = {name}({args})[0]")
