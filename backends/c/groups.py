"""Fused groups that the C target forms in its plan (after ``plan.flatten``): kernels of
several nodes whose intermediate results never reach memory (``form_groups``).

``attention.attention_groups``: attention's ``gemm -> masks -> softmax -> gemm`` as one kernel,
``attention_grad.attention_grad_groups`` its gradient (dQ, dK, dV from dO) as another.
``rows.row_groups``: runs of kernels that each work on rows alone (a loss over a vocabulary) as
one kernel that keeps each row in cache.

``product_sums``: ``reduce_sum(gemm(a, b), batch axes)`` -- the gradient of a weight that a
batched product shares across its batch (every linear layer of a transformer) -- becomes one
``gemm_reduce`` kernel (``mm.emit_batch_sum``): the batched products are not stored, only their
sum, computed in reduce_sum's order. The group is a fused node of the plan only; the graph
keeps its two nodes (every other target runs them as they are).
"""

from __future__ import annotations

from typing import Callable

from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import make_fused
from gradc.passes.fusion import build_body, external_inputs

from gradc.backends.plan import Plan
from gradc.backends.c.kernel import Kernel
from gradc.backends.c.mm import batch_sum_ok, emit_batch_sum
from gradc.backends.c.attention import attention_groups, emit_attention
from gradc.backends.c.rows import emit_rows, row_groups
from gradc.backends.c.attention_grad import attention_grad_groups, emit_attention_grad

GROUP_EMITTERS: dict[str, Callable[[Kernel], None]] = {
    "gemm_reduce": emit_batch_sum, "attention": emit_attention, "rows": emit_rows,
    "attention_grad": emit_attention_grad}


def readers(plan: Plan) -> dict[Value, int]:
    """How many operand slots of the plan's kernels read each value."""
    count: dict[Value, int] = {}
    for n in plan.nodes:
        for u in n.inputs:
            r = plan.resolve(u)
            count[r] = count.get(r, 0) + 1
    return count


def group(plan: Plan, members: list[Node], kind: str, name: str) -> Node:
    """A fused node of ``members`` (in plan order) returning the last member's results, which
    become aliases of the node's (the other members' results must have no outer reader)."""
    inputs = external_inputs(members)
    body: Graph = build_body(name, members, inputs, list(members[-1].outputs))
    node = make_fused(None, inputs, body, kind)
    for old, new in zip(members[-1].outputs, node.outputs):
        plan.alias[old] = new
    return node


def product_sums(graph: Graph, plan: Plan) -> None:
    """Each ``reduce_sum`` over all the batch axes of a gemm that only it reads, where
    ``mm.batch_sum_ok`` holds, becomes a ``gemm_reduce`` group (module docstring)."""
    outs = {plan.resolve(v) for v in graph.outputs}
    count = readers(plan)
    kernels = set(plan.nodes)
    replace: dict[Node, Node] = {}
    drop: set[Node] = set()
    for n in plan.nodes:
        if n.op != "reduce_sum" or n.body is not None:
            continue
        u = plan.resolve(n.inputs[0])
        g = u.producer
        if (g is None or g not in kernels or g.op != "gemm" or g in drop or u in outs
                or count.get(u) != 1 or not batch_sum_ok(g, n, plan.sizes)):
            continue
        replace[n] = group(plan, [g, n], "gemm_reduce", f"gemm_reduce_{len(replace)}")
        drop.add(g)
    plan.nodes[:] = [replace.get(n, n) for n in plan.nodes if n not in drop]


def form_groups(graph: Graph, plan: Plan) -> None:
    """Every fused group of the C target, formed in the plan (module docstring)."""
    attention_groups(graph, plan)
    attention_grad_groups(graph, plan)
    row_groups(graph, plan)
    product_sums(graph, plan)
