"""The state-update convention of forward graphs (docs/training.md).

A forward graph output named ``<p>.next``, where ``p`` is a parameter of the graph of the same
type, is the value ``p`` takes after a training step: a state update computed by the forward
pass itself (batch normalization's running statistics, SPEC-training.md §12.5), never by an
optimizer. ``gradc.from_onnx`` writes these outputs for training-mode ``BatchNormalization``,
``gradc.from_torch`` for every buffer a module's forward updates (batch normalization's running
statistics and its int64 ``num_batches_tracked``: a state parameter may have any dtype); a graph
built by hand declares one with ``graph.output(value, f"{p.name}.next")``.

``gradc.grad`` gives state outputs no cotangent input (they are not differentiated), and
``gradc.training_step`` makes each the next value of its parameter.
"""

from __future__ import annotations

from gradc.ir.core import Graph, Parameter, Value

SUFFIX = ".next"


def state_outputs(graph: Graph) -> dict[Parameter, Value]:
    """Each parameter with a state update, and the output that holds it (graph order)."""
    outs = {v.name: v for v in graph.outputs}
    found: dict[Parameter, Value] = {}
    for p in graph.parameters:
        v = outs.get(p.name + SUFFIX)
        if v is not None and v.type == p.type:
            found[p] = v
    return found


__all__ = ["SUFFIX", "state_outputs"]
