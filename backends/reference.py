"""The ``"reference"`` target: the IR's own interpreter (``gradc.ir.interpret``), the oracle."""

from __future__ import annotations

from typing import Any, Mapping

from gradc.ir.core import Graph
from gradc.ir.interpret import ReferenceRunner
from gradc.ir.ops import REGISTRY

from gradc.backends.target import Lowered, reject_options


class ReferenceTarget:
    """Runs each node's ``OpDef.reference`` (SPEC.md to the letter); writes no program."""

    name: str = "reference"
    exact: bool = True
    artifact_kind: str | None = None

    def lowerings(self) -> frozenset[str]:
        """Every registered op, and fused groups (run node by node)."""
        return frozenset(REGISTRY) | {"fused"}

    def artifact(self, graph: Graph, shapes: Mapping[str, int]) -> str:
        """The text IR: the reference runs the graph itself."""
        return str(graph) + "\n"

    def lower(self, graph: Graph, shapes: Mapping[str, int], **options: Any) -> Lowered:
        """A runner that interprets the graph."""
        reject_options(self.name, options)
        return Lowered(ReferenceRunner(graph))


TARGET = ReferenceTarget()
