"""NumPy emitters of SPEC-training.md §19.1 and §20.1 that need more than ``_helper``.

``random_generator`` calls the copy of its reference with ``output_sizes`` bound: a symbolic
dim there is read from the function's symbol locals (the reference's ``evaluate`` does the
same with the interpreter's bindings).
"""

from __future__ import annotations

from gradc.backends.numpy.function import FunctionEmitter, Step
from gradc.backends.numpy.helpers import reference_helper


def emit_random_generator(em: FunctionEmitter, step: Step) -> None:
    """``bits, state = _random_generator({attrs, output_sizes bound}, state)``."""
    node = step.node
    name = reference_helper("random_generator")
    attrs = em.module.attrs(node.attrs)
    em.module.use(name)
    sizes = em.shape(node.attrs["output_sizes"])
    outs = [em.fresh_array(v) for v in node.outputs]
    em.emit(f"{', '.join(outs)} = {name}(dict({attrs}, output_sizes={sizes}), "
            f"{em.var(step.ins[0])})")
