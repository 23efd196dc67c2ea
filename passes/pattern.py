"""Local rewrites as patterns (``match`` -> bindings, ``rewrite`` -> replacement values), driven
to a fixpoint by one worklist.

A pattern names the ops it can match at its root. The driver visits every node once in
topological order, then revisits the users of every value that a rewrite replaced and every node
a rewrite created, until no pattern matches anywhere. Nodes that a rewrite leaves without uses
are erased on the way (``Rewriter.erase``). Each application is counted in the statistics as
``rewritten:<pattern name>``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Sequence

from gradc.errors import GradcError
from gradc.ir.core import Graph, Node, Value
from gradc.passes.rewriter import Rewriter

Bindings = dict[str, Any]


@dataclass(frozen=True)
class Pattern:
    """A local rewrite rooted at a node whose op is one of ``roots``."""

    name: ClassVar[str] = "pattern"
    roots: ClassVar[tuple[str, ...]] = ()

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        """Bindings if the rewrite applies at ``node``, else None (must not edit anything)."""
        raise NotImplementedError

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        """Values that stand for the node's results (new nodes via ``rw.create``)."""
        raise NotImplementedError


def apply_patterns(graph: Graph, patterns: Iterable[Pattern],
                   max_rewrites: int | None = None) -> tuple[Graph, bool, dict[str, int]]:
    """Run the patterns to a fixpoint; returns (new graph, changed, statistics)."""
    by_op: dict[str, list[Pattern]] = {}
    for p in patterns:
        for op in p.roots:
            by_op.setdefault(op, []).append(p)
    rw = Rewriter(graph)
    limit = max_rewrites if max_rewrites is not None else 8 * len(graph.nodes) + 1000
    worklist: deque[Node] = deque(n for n in graph.nodes if n.op in by_op)
    queued = set(worklist)
    count = 0
    while worklist:
        node = worklist.popleft()
        queued.discard(node)
        if node in rw.erased:
            continue
        applied, touched = _apply_first(node, by_op.get(node.op, ()), rw)
        if applied is None:
            continue
        count += 1
        if count > limit:
            raise GradcError(f"internal error: rewrite patterns did not converge after {limit} "
                             f"rewrites (last: {applied.name})")
        for n in touched:
            if n not in queued and n.op in by_op and n not in rw.erased:
                queued.add(n)
                worklist.append(n)
    stats = {"rewrites": count} | dict(rw.stats)
    if not rw.changed:
        return graph, False, stats
    return rw.finish(), True, stats


def _apply_first(node: Node, patterns: Sequence[Pattern],
                 rw: Rewriter) -> tuple[Pattern | None, list[Node]]:
    for p in patterns:
        b = p.match(node, rw)
        if b is None:
            continue
        rw.current = node
        first_new = len(rw.created)
        values = p.rewrite(node, b, rw)
        users = [u for v in node.outputs for u in rw.users_of(v)]
        rw.replace(node, values)
        rw.current = None
        rw.stats[f"rewritten:{p.name}"] += 1
        created = rw.created[first_new:]
        for c in created:
            if c not in rw.erased and rw.is_dead(c):
                rw.erase(c)
        return p, created + users
    return None, []
