"""Constant folding through the reference implementations (``gradc.ir.interpret``).

    %c = constant() {value = array<f32[2]: [1.0, -2.0]>} : f32[2]
    %r = relu(%c) : f32[2]                  ->   %r = constant() {value = array<f32[2]: [1.0, 0.0]>}

A node is folded when every operand is a constant and every result has static shape and at most
``max_elements`` elements, so folding never bloats the program. The reference target is the
oracle, so a folded value is exactly what the node would have computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradc.ir.interpret import evaluate_node
from gradc.ir.core import Graph, Node
from gradc.passes.manager import Pass, PassResult, register_pass
from gradc.passes.rewriter import Rewriter, new_node


def _small(n: Node, limit: int) -> bool:
    for v in n.outputs:
        size = v.type.size  # an exact int: a 2**64-element result is not "small"
        if size is None or size > limit:
            return False
    return True


@register_pass
@dataclass
class ConstantFold(Pass):
    """Evaluate nodes whose operands are all constants into new constants."""

    name = "constant-fold"
    max_elements: int = 4096

    def run(self, graph: Graph) -> PassResult:
        rw = Rewriter(graph)
        folded = 0
        for n in graph.nodes:
            if (n in rw.erased or n.op == "constant" or not n.inputs
                    or not _small(n, self.max_elements)):
                continue
            producers = [rw.def_of(v, "constant") for v in n.inputs]
            if any(p is None for p in producers):
                continue
            args = [np.array(p.attrs["value"]) for p in producers]  # type: ignore[union-attr]
            with np.errstate(all="ignore"):  # inf - inf is NaN here as at run time: no warning
                values = evaluate_node(n, args, {})
            consts = [new_node("constant", [], {"value": np.asarray(a)}) for a in values]
            if [c.outputs[0].type for c in consts] != [v.type for v in n.outputs]:
                continue  # a literal that cannot hold this type exactly: leave the node
            for c in consts:
                rw.insert(c, before=n)
            rw.replace(n, [c.outputs[0] for c in consts])
            folded += 1
        if not folded:
            return PassResult(graph, False, {"nodes-folded": 0})
        return PassResult(rw.finish(), True, {"nodes-folded": folded})
