"""The body of a fused group the C target forms in its plan: its members' nodes cloned in plan
order, a fused element-wise member's own body inlined, so the group's emitter sees primitive
nodes only (``attention.py``, ``rows.py``)."""

from __future__ import annotations

from gradc.ir.core import Graph, Node, Value

from gradc.backends.plan import Plan


def inline_body(plan: Plan, members: list[Node], name: str, keep: list[Value]) -> tuple[Graph,
                                                                                   list[Value]]:
    """The group's body (fused element-wise members inlined) and its outer operands; its
    outputs are the body values of ``keep`` (outer values)."""
    body = Graph(name)
    vmap: dict[Value, Value] = {}
    ext: list[Value] = []

    def val(v: Value) -> Value:
        v = plan.resolve(v)
        if v not in vmap:
            vmap[v] = body.input(f"in{len(ext)}", v.type.dtype, v.type.shape)
            ext.append(v)
        return vmap[v]

    def add(n: Node, ins: list[Value]) -> Node:
        c = Node(n.op, ins, n.attrs, [o.type for o in n.outputs])
        body.append(c)
        return c

    for m in members:
        if m.body is None:
            c = add(m, [val(u) for u in m.inputs])
            vmap.update(zip((plan.resolve(o) for o in m.outputs), c.outputs))
            continue
        inner = {bi: val(oi) for bi, oi in zip(m.body.inputs, m.inputs)}
        for n in m.body.nodes:
            c = add(n, [inner[u] for u in n.inputs])
            inner.update(zip(n.outputs, c.outputs))
        vmap.update(zip((plan.resolve(o) for o in m.outputs),
                        (inner[b] for b in m.body.outputs)))
    for v in keep:
        body.add_output(vmap[v])
    return body, ext
