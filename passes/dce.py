"""Dead-code elimination: drop nodes none of whose results reaches a graph output.

    graph g(%x: f32[4]) {              graph g(%x: f32[4]) {
      %0 = relu(%x) : f32[4]      ->     %1 = neg(%x) : f32[4]
      %1 = neg(%x) : f32[4]              return %1
      return %1                        }
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from gradc.ir.core import Graph
from gradc.passes.manager import Pass, PassResult, register_pass
from gradc.ir.rebuild import rebuild_graph


@register_pass
@dataclass
class DeadCodeElimination(Pass):
    """Remove nodes whose results are never used by an output (every op is pure)."""

    name = "dce"

    def run(self, graph: Graph) -> PassResult:
        live = set(graph.outputs)
        keep = []
        for n in reversed(graph.nodes):
            if any(v in live for v in n.outputs):
                keep.append(n)
                live.update(n.inputs)
        removed = len(graph.nodes) - len(keep)
        if not removed:
            return PassResult(graph, False, {"nodes-removed": 0})
        keep.reverse()
        return PassResult(rebuild_graph(graph, keep), True, {"nodes-removed": removed})
