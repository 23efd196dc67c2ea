"""Dead-code elimination: drop nodes none of whose results reaches an output.

    %0 = relu(%x) : f32[4]        ->   %1 = neg(%x) : f32[4]
    %1 = neg(%x) : f32[4]               return %1
    return %1
"""

from __future__ import annotations

from dataclasses import dataclass

from gradc.ir.core import Graph
from gradc.ir.rewrite import rebuild
from gradc.passes.manager import Pass, PassResult, register_pass


@register_pass
@dataclass
class DeadCodeElimination(Pass):
    """Remove nodes whose results are never used by an output."""

    name = "dce"

    def run(self, graph: Graph) -> PassResult:
        live = {id(v) for v in graph.outputs}
        keep = []
        for n in reversed(graph.nodes):
            if any(id(v) in live for v in n.outputs):
                keep.append(n)
                live.update(id(v) for v in n.inputs)
        removed = len(graph.nodes) - len(keep)
        if not removed:
            return PassResult(graph, False, {"nodes-removed": 0})
        return PassResult(rebuild(graph, reversed(keep)), True, {"nodes-removed": removed})
