"""NumPy emitter of SPEC-training.md §14.4 ``element_count`` (its dtype attribute is no literal
of the generated module, so it is written out here rather than through ``_helper``)."""

from __future__ import annotations

from gradc.backends.numpy.function import FunctionEmitter, Step
from gradc.backends.numpy.text import dtype_expr


def emit_element_count(em: FunctionEmitter, step: Step) -> None:
    """``y = np.asarray(<product of the sizes on axes>, np.int64).astype(<dtype>)``."""
    node = step.node
    x = node.inputs[0]
    sizes = em.shape(tuple(x.type.shape[a] for a in node.attrs["axes"]))
    y = em.fresh_array(node.outputs[0])
    em.emit("with np.errstate(over='ignore'):")
    em.emit(f"    {y} = np.asarray(int(np.prod({sizes}, dtype=np.int64)), np.int64)"
            f".astype({dtype_expr(node.outputs[0].type.dtype)})")
