"""Values, nodes and graphs: a flat SSA list of nodes in topological order."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.types import DType, TensorType


class Value:
    """An SSA value: a graph input or one result of a node, with a unique name in its graph."""

    __slots__ = ("name", "type", "producer", "graph", "__weakref__")

    def __init__(self, name: str, type: TensorType, producer: "Node | None" = None,
                 graph: "Graph | None" = None) -> None:
        self.name = name
        self.type = type
        self.producer = producer
        self.graph = graph

    @property
    def dtype(self) -> DType:
        """Shorthand for ``self.type.dtype``."""
        return self.type.dtype

    @property
    def shape(self) -> tuple:
        """Shorthand for ``self.type.shape``."""
        return self.type.shape

    def __repr__(self) -> str:
        return f"Value(%{self.name}: {self.type})"


class Node:
    """One operation: op name, operand values, attributes, result values (and a body if fused)."""

    __slots__ = ("op", "inputs", "outputs", "attrs", "body", "name")

    def __init__(self, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any],
                 out_types: Sequence[TensorType], body: "Graph | None" = None,
                 name: str | None = None) -> None:
        self.op = op
        self.inputs: tuple[Value, ...] = tuple(inputs)
        self.attrs: Mapping[str, Any] = MappingProxyType(dict(attrs))
        self.body = body
        self.name = name
        self.outputs: tuple[Value, ...] = tuple(Value("", t, self) for t in out_types)

    def __repr__(self) -> str:
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        return f"Node({outs} = {self.op}({ins}))"


class Graph:
    """A named graph: typed inputs, nodes in topological order, named outputs."""

    def __init__(self, name: str = "main") -> None:
        if not isinstance(name, str) or not name:
            raise VerifyError(f"graph: name: expected a non-empty string, got {name!r}")
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._names: set[str] = set()
        self._counter = 0

    # -- naming ---------------------------------------------------------------------------
    def fresh_name(self) -> str:
        """A value name not used in this graph yet (``0``, ``1``, ...)."""
        while str(self._counter) in self._names:
            self._counter += 1
        name = str(self._counter)
        self._counter += 1
        return name

    def _claim(self, name: str, what: str) -> str:
        if not isinstance(name, str) or not name:
            raise VerifyError(f"{what}: name: expected a non-empty string, got {name!r}")
        if name in self._names:
            raise VerifyError(f"{what}: name: expected a name not used in graph "
                              f"{self.name!r}, got {name!r}")
        self._names.add(name)
        return name

    def rename(self, value: Value, name: str) -> None:
        """Give a value of this graph a new unique name."""
        if value.name == name:
            return
        self._claim(name, "rename")
        self._names.discard(value.name)
        value.name = name

    # -- building -------------------------------------------------------------------------
    def input(self, name: str, dtype: DType | str, shape: Iterable) -> Value:
        """Add a graph input of the given dtype and shape (dims: int or symbol name)."""
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
            raise VerifyError(f"input {name!r}: shape: expected a sequence of dims, got "
                              f"{shape!r}")
        t = TensorType(DType.of(dtype), tuple(shape))
        v = Value(self._claim(name, "input"), t, None, self)
        self.inputs.append(v)
        return v

    def output(self, value: Value, name: str | None = None) -> Value:
        """Mark a value as a graph output, optionally renaming it; returns the output value."""
        if not isinstance(value, Value) or value.graph is not self:
            raise VerifyError(f"output: value: expected a value of graph {self.name!r}, "
                              f"got {value!r}")
        needs_copy = value.producer is None or value in self.outputs
        if name is not None and name != value.name and not needs_copy and name not in self._names:
            self.rename(value, name)
        elif needs_copy or (name is not None and name != value.name):
            from gradc.ir.ops.registry import make_node
            value = make_node("identity", [value], {})
            if name is not None:
                self.rename(value, name)
        self.outputs.append(value)
        return value

    def constant(self, array: Any, dtype: DType | str | None = None) -> Value:
        """Add a constant node holding a copy of ``array``."""
        from gradc.ir.ops.registry import make_node
        return make_node("constant", [], {"value": _as_array(array, dtype)}, graph=self)

    def append(self, node: Node) -> Node:
        """Append a node whose operands are already in this graph, naming its results."""
        for v in node.outputs:
            if not v.name:
                v.name = self.fresh_name()
            self._claim(v.name, node.op)
            v.graph = self
        self.nodes.append(node)
        return node

    # -- inspection -----------------------------------------------------------------------
    def values(self) -> list[Value]:
        """Every value of the graph: inputs, then node results in order."""
        return list(self.inputs) + [v for n in self.nodes for v in n.outputs]

    def users(self) -> dict[Value, list[Node]]:
        """Map from each value to the nodes that use it, in node order."""
        out: dict[Value, list[Node]] = {v: [] for v in self.values()}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def to_networkx(self):
        """The dependence graph as a ``networkx.DiGraph`` of nodes (edges carry the value)."""
        import networkx as nx

        dg = nx.DiGraph()
        for i, n in enumerate(self.nodes):
            dg.add_node(n, index=i)
        for n in self.nodes:
            for v in n.inputs:
                if v.producer is not None and v.producer in dg:
                    dg.add_edge(v.producer, n, value=v)
        return dg

    def verify(self) -> "Graph":
        """Check the graph's invariants (see ``gradc.ir.verify``); returns self."""
        from gradc.ir.verify import verify
        verify(self)
        return self

    def copy(self) -> "Graph":
        """A deep copy that shares no values or nodes with this graph."""
        from gradc.ir.parser import parse
        return parse(str(self))

    def __str__(self) -> str:
        from gradc.ir.printer import print_graph
        return print_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes>"

    def __eq__(self, other: object) -> bool:
        # The printed form is canonical and complete, so it is the structural identity.
        return isinstance(other, Graph) and str(self) == str(other)

    def __hash__(self) -> int:
        return id(self)

    def __enter__(self) -> "Graph":
        _GRAPH_STACK.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _GRAPH_STACK.pop()


_GRAPH_STACK: list[Graph] = []


def current_graph() -> Graph | None:
    """The graph of the innermost ``with graph:`` block, if any."""
    return _GRAPH_STACK[-1] if _GRAPH_STACK else None


def _as_array(array: Any, dtype: DType | str | None) -> np.ndarray:
    if isinstance(array, Value):
        raise VerifyError("constant: value: expected an array, got a graph value")
    try:
        a = np.array(array, dtype=DType.of(dtype).numpy if dtype is not None else None)
    except (TypeError, ValueError) as e:
        raise VerifyError(f"constant: value: expected an array of numbers, got {e}") from None
    return a
