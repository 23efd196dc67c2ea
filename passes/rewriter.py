"""A rewritable view of a graph: replacements, inserted nodes and use counts, then a new graph.

Passes never mutate the graph they are given. A ``Rewriter`` records what a pass decides
(replace a node's results by other values, insert new nodes before a node, erase nodes) and
``finish()`` builds the new graph in one linear walk. Inserted nodes are free ``Node`` objects
built with ``Rewriter.create`` (checked and typed by the op's ``infer``); they are placed just
before the node given as ``before`` (by default the node being rewritten), so any value that was
available there is available to them.

Naming: surviving nodes keep their result names; a new value that replaces an old one takes the
old name when it is free, otherwise a fresh number. A replaced graph output keeps its output
name (an ``identity`` is added only where a value must be output under two names or where the
output is a graph input).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterator, Mapping, Sequence

from gradc.errors import GradcError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.ops.registry import infer_node
from gradc.ir.rebuild import rebuild_graph


def new_node(op: str, inputs: Sequence[Value], attrs: Mapping[str, Any]) -> Node:
    """A checked, typed node that belongs to no graph yet (its operands are not touched)."""
    _, norm, types = infer_node(op, [v.type for v in inputs], attrs)
    return Node(op, inputs, norm, types)


class Rewriter:
    """Mutable bookkeeping over an immutable graph; ``finish()`` returns the rewritten graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.repl: dict[Value, Value] = {}
        self.before: dict[Node, list[Node]] = {}
        self.erased: set[Node] = set()
        self.uses: Counter[Value] = Counter()
        self.users: dict[Value, list[Node]] = {}
        self.outputs: Counter[Value] = Counter(graph.outputs)
        self.preferred: dict[Value, str] = {}
        self.stats: Counter[str] = Counter()
        self.changed = False
        self.current: Node | None = None
        self.created: list[Node] = []
        for n in graph.nodes:
            self._count(n)
        self.uses.update(graph.outputs)

    # -- queries ----------------------------------------------------------------------
    def find(self, v: Value) -> Value:
        """The value that currently stands for ``v`` (replacements applied, path-compressed)."""
        root = v
        while root in self.repl:
            root = self.repl[root]
        while v is not root:
            nxt = self.repl[v]
            self.repl[v] = root
            v = nxt
        return root

    def operands(self, node: Node) -> tuple[Value, ...]:
        """The node's operands with replacements applied."""
        return tuple(self.find(v) for v in node.inputs)

    def operand(self, node: Node, i: int) -> Value:
        """Operand ``i`` of a node, with replacements applied."""
        return self.find(node.inputs[i])

    def producer(self, v: Value) -> Node | None:
        """The live node that computes the value standing for ``v`` (None for a graph input)."""
        n = self.find(v).producer
        return None if n is None or n in self.erased else n

    def def_of(self, v: Value, op: str) -> Node | None:
        """The producer of ``v`` if it is an ``op`` node."""
        n = self.producer(v)
        return n if n is not None and n.op == op else None

    def num_uses(self, v: Value) -> int:
        """How many operand slots and graph outputs read the value standing for ``v``."""
        return self.uses[self.find(v)]

    def is_output(self, v: Value) -> bool:
        """True if the value standing for ``v`` is a graph output."""
        return self.outputs[self.find(v)] > 0

    def users_of(self, v: Value) -> list[Node]:
        """Live nodes that read ``v`` (deduplicated, in no particular order)."""
        v = self.find(v)
        seen: dict[Node, None] = {}
        for n in self.users.get(v, ()):
            if n not in self.erased and n not in seen and any(self.find(x) is v for x in n.inputs):
                seen[n] = None
        return list(seen)

    # -- edits ------------------------------------------------------------------------
    def create(self, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None,
               before: Node | None = None) -> Value:
        """Insert a new ``op`` node (before ``before``, default the node being rewritten)."""
        node = new_node(op, [self.find(v) for v in inputs], attrs or {})
        self.insert(node, before)
        return node.outputs[0]

    def insert(self, node: Node, before: Node | None = None) -> Node:
        """Insert an already built node whose operands are live values."""
        anchor = before if before is not None else self.current
        if anchor is None:
            raise ValueError("Rewriter.insert: no position given and no node being rewritten")
        self.before.setdefault(anchor, []).append(node)
        self.created.append(node)
        self._count(node)
        self.changed = True
        return node

    def replace(self, node: Node, values: Sequence[Value]) -> None:
        """Let ``values`` stand for the node's results everywhere, then erase the node."""
        for old, new in zip(node.outputs, values):
            self.replace_value(old, new)
        self.erase(node)

    def replace_value(self, old: Value, new: Value) -> None:
        """Let ``new`` stand for ``old`` everywhere (its users are moved over)."""
        old, new = self.find(old), self.find(new)
        if old is new:
            return
        self.repl[old] = new
        self.uses[new] += self.uses.pop(old, 0)
        self.outputs[new] += self.outputs.pop(old, 0)
        self.users.setdefault(new, []).extend(self.users.pop(old, ()))
        if not new.name and new not in self.preferred:
            name = old.name or self.preferred.get(old)
            if name:
                self.preferred[new] = name
        self.changed = True

    def erase(self, node: Node) -> None:
        """Remove a node, and then every producer that this leaves without uses."""
        stack = [node]
        while stack:
            n = stack.pop()
            if n in self.erased:
                continue
            self.erased.add(n)
            self.changed = True
            self.stats["nodes-erased"] += 1
            for v in n.inputs:
                r = self.find(v)
                self.uses[r] -= 1
                p = r.producer
                if p is not None and p not in self.erased and self.is_dead(p):
                    stack.append(p)

    def is_dead(self, n: Node) -> bool:
        """True if no operand slot or graph output reads any result of ``n``."""
        return all(self.uses[v] <= 0 for v in n.outputs)

    def _count(self, node: Node) -> None:
        for v in node.inputs:
            r = self.find(v)
            self.uses[r] += 1
            self.users.setdefault(r, []).append(node)

    # -- result -----------------------------------------------------------------------
    def live_nodes(self) -> Iterator[Node]:
        """Live nodes in an order that defines every value before its uses."""
        stack: list[Iterator[Node]] = [iter(self.graph.nodes)]
        pending: list[Node | None] = [None]
        while stack:
            n = next(stack[-1], None)
            if n is None:
                stack.pop()
                done = pending.pop()
                if done is not None and done not in self.erased:
                    yield done
                continue
            if n in self.before:
                stack.append(iter(self.before[n]))
                pending.append(n)
            elif n not in self.erased:
                yield n

    def schedule(self) -> list[Node]:
        """Live nodes in their positions, each moved after the producers of its operands.

        Inserted nodes are placed where a pass put them; a fused node may read values that
        another group defines later in that order, so a depth-first walk over operands pulls
        producers forward. Linear time; a cycle is an internal error.
        """
        order: list[Node] = []
        done: set[Node] = set()
        active: set[Node] = set()
        for n in self.live_nodes():
            if n in done:
                continue
            stack = [(n, iter(n.inputs))]
            active.add(n)
            while stack:
                node, it = stack[-1]
                for v in it:
                    p = self.find(v).producer
                    if p is None or p in done or p in self.erased:
                        continue
                    if p in active:
                        raise GradcError(f"internal error: a rewrite made a cycle through {p!r}")
                    active.add(p)
                    stack.append((p, iter(p.inputs)))
                    break
                else:
                    stack.pop()
                    active.discard(node)
                    done.add(node)
                    order.append(node)
        return order

    def finish(self) -> Graph:
        """The rewritten graph (a new graph; the input graph is untouched)."""
        return rebuild_graph(self.graph, self.schedule(), self.find, self.preferred)
