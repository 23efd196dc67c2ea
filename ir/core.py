"""Values, nodes and graphs: a flat SSA list of nodes in topological order."""

from __future__ import annotations

import struct
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.printer import print_graph
from gradc.ir.types import DType, TensorType, check_name


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


class Parameter(Value):
    """A named tensor with an initial value (``.value``, a NumPy array of the value's type).

    ``.value`` is None only for a parameter parsed from text without values. It is a constant
    for inference; ``gradc.grad`` can differentiate with respect to it, and a
    compiled ``Executable`` feeds its value unless a call passes another array under its name.
    """

    __slots__ = ("value",)

    def __init__(self, name: str, value: np.ndarray | None, graph: "Graph | None" = None,
                 type: TensorType | None = None) -> None:
        if type is None:
            if value is None:
                raise VerifyError(f"parameter {name!r}: value: expected an array, got None")
            type = TensorType(DType.of(value.dtype), value.shape)
        super().__init__(name, type, None, graph)
        self.value = value

    def __repr__(self) -> str:
        return f"Parameter(%{self.name}: {self.type})"


def parameter_array(value: Any, what: str) -> np.ndarray:
    """A parameter's value as a fresh C-contiguous array of a gradc dtype; VerifyError else."""
    if isinstance(value, Value):
        raise VerifyError(f"{what}: value: expected an array, got a graph value")
    try:
        a = np.array(value)
    except (TypeError, ValueError) as e:
        raise VerifyError(f"{what}: value: expected an array of numbers, got {e}") from None
    try:
        dtype = DType.of(a.dtype)
    except VerifyError:
        raise VerifyError(f"{what}: value: expected an array of a gradc dtype, got "
                          f"{a.dtype}") from None
    if a.size == 0:
        raise VerifyError(f"{what}: value: expected a non-empty array (gradc has no empty "
                          f"tensors), got shape {a.shape}")
    if a.ndim > 8:
        raise VerifyError(f"{what}: value: expected rank at most 8, got {a.ndim}")
    return np.array(a, dtype=dtype.numpy, order="C")  # (ascontiguousarray makes 0-d 1-d)


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
    """A named graph: typed inputs, nodes in topological order, named outputs.

    ``inputs``, ``parameters``, ``nodes`` and ``outputs`` are read-only tuples: a graph changes
    only through its methods (``input``, ``parameter``, ``append``, ``output``, ``add_output``,
    ``retain``), which keep its names unique. Passes never change a graph; they build a new
    one (``gradc.ir.rebuild``). A graph is mutable, so it is unhashable; ``==`` is
    ``structurally_equal``.
    """

    def __init__(self, name: str = "main") -> None:
        self.name = check_name(name, "graph: name")
        self._inputs: list[Value] = []
        self._parameters: list[Parameter] = []
        self._nodes: list[Node] = []
        self._outputs: list[Value] = []
        self._views: dict[str, tuple] = {}
        self._names: set[str] = set()
        self._counter = 0

    # -- the parts, read-only -------------------------------------------------------------
    def _view(self, key: str, items: list) -> tuple:
        view = self._views.get(key)
        if view is None or len(view) != len(items):
            view = self._views[key] = tuple(items)
        return view

    @property
    def inputs(self) -> tuple[Value, ...]:
        """The graph's inputs, in order."""
        return self._view("inputs", self._inputs)

    @property
    def parameters(self) -> tuple[Parameter, ...]:
        """The graph's parameters, in the order they were made."""
        return self._view("parameters", self._parameters)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes in topological order."""
        return self._view("nodes", self._nodes)

    @property
    def outputs(self) -> tuple[Value, ...]:
        """The graph's outputs, in order (a value may not appear twice)."""
        return self._view("outputs", self._outputs)

    # -- naming ---------------------------------------------------------------------------
    def fresh_name(self) -> str:
        """A value name not used in this graph yet (``0``, ``1``, ...)."""
        while str(self._counter) in self._names:
            self._counter += 1
        name = str(self._counter)
        self._counter += 1
        return name

    def uses_name(self, name: str) -> bool:
        """True when a value of this graph has the name."""
        return name in self._names

    def _claim(self, name: str, what: str) -> str:
        check_name(name, f"{what}: name")
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
        self._inputs.append(v)
        return v

    def parameter(self, name: str, value: Any) -> Parameter:
        """Add a parameter: a named tensor whose initial value (an array) gives its type."""
        return self.add_parameter(name, parameter_array(value, f"parameter {name!r}"))

    def add_parameter(self, name: str, value: np.ndarray | None,
                      type: TensorType | None = None) -> Parameter:
        """Add a parameter holding ``value`` itself (no copy: a checked array of its type, or
        None with a ``type``: no value yet)."""
        if type is None and value is None:
            raise VerifyError(f"parameter {name!r}: value: expected an array, got None")
        p = Parameter(self._claim(name, "parameter"), value, self, type)
        self._parameters.append(p)
        return p

    def output(self, value: Value, name: str | None = None) -> Value:
        """Mark a value as a graph output, optionally renaming it; returns the output value.

        An input, a value that is already an output, or a value whose name cannot change is
        returned through an ``identity`` copy. A value made without a graph (a constant, or ops
        on constants) joins this graph (``adopt``).
        """
        if isinstance(value, Value) and value.graph is None:
            adopt(self, value, "output: value")
        if not isinstance(value, Value) or value.graph is not self:
            owner = f" of graph {value.graph.name!r}" if isinstance(value, Value) and \
                value.graph is not None else ""
            raise VerifyError(f"output: value: expected a value of graph {self.name!r}, "
                              f"got {value!r}{owner}")
        needs_copy = value.producer is None or value in self._outputs
        if name is not None and name != value.name and not needs_copy and name not in self._names:
            self.rename(value, name)
        elif needs_copy or (name is not None and name != value.name):
            value = self.identity(value)
            if name is not None:
                self.rename(value, name)
        self._outputs.append(value)
        return value

    def identity(self, value: Value) -> Value:
        """Append ``identity(value)`` (its type is the operand's, so no inference is needed)."""
        return self.append(Node("identity", [value], {}, [value.type])).outputs[0]

    def add_output(self, value: Value) -> None:
        """Mark a value of this graph as an output as it is (no renaming, no copy)."""
        if value.graph is not self or value in self._outputs:
            raise VerifyError(f"output: value: expected a value of graph {self.name!r} that is "
                              f"not an output yet, got {value!r}")
        self._outputs.append(value)

    def append(self, node: Node) -> Node:
        """Append a node whose operands are already in this graph, naming its results."""
        for v in node.outputs:
            if not v.name:
                v.name = self.fresh_name()
            self._claim(v.name, node.op)
            v.graph = self
        self._nodes.append(node)
        return node

    def retain(self, nodes: Iterable[Node]) -> None:
        """Keep only ``nodes`` (a subset of this graph's, in order); their names stay taken."""
        keep = list(nodes)
        kept = set(keep)
        for n in self._nodes:
            if n not in kept:
                self._names.difference_update(v.name for v in n.outputs)
        self._nodes = keep
        self._views.pop("nodes", None)

    # -- inspection -----------------------------------------------------------------------
    def values(self) -> list[Value]:
        """Every value of the graph: inputs, parameters, then node results in order."""
        results = [v for n in self._nodes for v in n.outputs]
        return list(self._inputs) + list(self._parameters) + results

    def users(self) -> dict[Value, list[Node]]:
        """Map from each value to the nodes that use it, in node order."""
        out: dict[Value, list[Node]] = {v: [] for v in self.values()}
        for n in self._nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def to_networkx(self) -> Any:
        """The dependence graph as a ``networkx.DiGraph`` of nodes (edges carry the value)."""
        import networkx as nx  # lazy: 0.2 s to load, and only the analyses that need it use it

        dg = nx.DiGraph()
        for i, n in enumerate(self._nodes):
            dg.add_node(n, index=i)
        for n in self._nodes:
            for v in n.inputs:
                if v.producer is not None and v.producer in dg:
                    dg.add_edge(v.producer, n, value=v)
        return dg

    def copy(self) -> "Graph":
        """A deep copy that shares no values or nodes with this graph (bodies copied too)."""
        new = Graph(self.name)
        vmap: dict[Value, Value] = {v: new.input(v.name, v.type.dtype, v.type.shape)
                                    for v in self._inputs}
        for p in self._parameters:
            vmap[p] = new.add_parameter(p.name, p.value, p.type)
        for n in self._nodes:
            body = n.body.copy() if n.body is not None else None
            m = Node(n.op, [vmap[x] for x in n.inputs], n.attrs, [v.type for v in n.outputs],
                     body=body, name=n.name)
            for old, v in zip(n.outputs, m.outputs):
                v.name = old.name
                vmap[old] = v
            new.append(m)
        for v in self._outputs:
            new.add_output(vmap[v])
        return new

    def __str__(self) -> str:
        return print_graph(self)

    def __repr__(self) -> str:
        params = f", {len(self._parameters)} parameters" if self._parameters else ""
        return f"<Graph {self.name}: {len(self._inputs)} inputs{params}, {len(self._nodes)} nodes>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and structurally_equal(self, other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __enter__(self) -> "Graph":
        _GRAPH_STACK.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _GRAPH_STACK.pop()


def structurally_equal(a: Graph, b: Graph) -> bool:
    """True when two graphs have the same name, inputs, parameters (names, types and values, bit
    for bit), nodes (ops, operands, attributes, result names and types, bodies) and outputs;
    what ``parse(str(g), parameters=...)`` preserves."""
    return _structure_difference(a, b) is None


def _structure_difference(a: Graph, b: Graph) -> str | None:
    """The first difference between two graphs, in words, or None when structurally equal."""
    if a.name != b.name:
        return f"graph names {a.name!r} and {b.name!r}"
    if len(a._inputs) != len(b._inputs) or len(a._nodes) != len(b._nodes):
        return (f"graph {a.name!r}: {len(a._inputs)} inputs, {len(a._nodes)} nodes against "
                f"{len(b._inputs)} inputs, {len(b._nodes)} nodes")
    index: dict[Value, int] = {}
    other: dict[Value, int] = {}
    for i, (x, y) in enumerate(zip(a._inputs, b._inputs)):
        if x.name != y.name or x.type != y.type:
            return f"input {i}: %{x.name}: {x.type} against %{y.name}: {y.type}"
        index[x], other[y] = i, i
    why = _parameter_difference(a, b, index, other)
    if why is not None:
        return why
    for k, (m, n) in enumerate(zip(a._nodes, b._nodes)):
        why = _node_difference(m, n, index, other)
        if why is not None:
            return f"node {k} ({m.op}): {why}"
        for x, y in zip(m.outputs, n.outputs):
            index[x], other[y] = len(index), len(other)
    if [index.get(v) for v in a._outputs] != [other.get(v) for v in b._outputs]:
        return "the outputs"
    return None


def _parameter_difference(a: Graph, b: Graph, index: dict[Value, int],
                          other: dict[Value, int]) -> str | None:
    if len(a._parameters) != len(b._parameters):
        return (f"graph {a.name!r}: {len(a._parameters)} parameters against "
                f"{len(b._parameters)}")
    for i, (x, y) in enumerate(zip(a._parameters, b._parameters)):
        if x.name != y.name or x.type != y.type:
            return f"parameter {i}: %{x.name}: {x.type} against %{y.name}: {y.type}"
        if not _same_attr(x.value, y.value):
            return f"parameter {i}: %{x.name}: the values differ"
        index[x], other[y] = len(index), len(other)
    return None


def parameters_as_inputs(g: Graph) -> Graph:
    """A copy of ``g`` whose parameters are inputs after its own (what the targets compile).

    A target needs no notion of parameters: the ``Executable`` feeds their values.
    """
    if not g._parameters:
        return g
    new = Graph(g.name)
    vmap: dict[Value, Value] = {v: new.input(v.name, v.type.dtype, v.type.shape)
                                for v in list(g._inputs) + list(g._parameters)}
    for n in g._nodes:
        m = Node(n.op, [vmap[x] for x in n.inputs], n.attrs, [v.type for v in n.outputs],
                 body=n.body, name=n.name)
        for old, v in zip(n.outputs, m.outputs):
            v.name = old.name
            vmap[old] = v
        new.append(m)
    for v in g._outputs:
        new.add_output(vmap[v])
    return new


def _node_difference(m: Node, n: Node, index: dict[Value, int],
                     other: dict[Value, int]) -> str | None:
    if m.op != n.op or m.name != n.name:
        return f"{m.op} against {n.op}"
    if [index.get(v) for v in m.inputs] != [other.get(v) for v in n.inputs]:
        return "operands"
    if [(v.name, v.type) for v in m.outputs] != [(v.name, v.type) for v in n.outputs]:
        return "results"
    if list(m.attrs) != list(n.attrs) or any(not _same_attr(m.attrs[k], n.attrs[k])
                                             for k in m.attrs):
        return "attributes"
    if (m.body is None) != (n.body is None):
        return "body"
    if m.body is not None and n.body is not None:
        return _structure_difference(m.body, n.body)
    return None


def _same_attr(x: Any, y: Any) -> bool:
    """Equal values of one type; floats and arrays compared bit for bit (-0.0, NaN payloads)."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == y.dtype
                and x.shape == y.shape and x.tobytes() == y.tobytes())
    if type(x) is not type(y):
        return False
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(_same_attr(a, b) for a, b in zip(x, y))
    if isinstance(x, float):
        return struct.pack("<d", x) == struct.pack("<d", y)
    return bool(x == y)


def adopt(graph: Graph, value: Value, what: str) -> None:
    """Append to ``graph`` the nodes made without a graph that compute ``value``, producers
    first: a constant built outside any graph (and any op applied only to such constants)
    belongs to the graph of its first user (API.md, ``constant``). A value of another graph
    on the way is a ``VerifyError`` naming ``what``."""
    if value.graph is not None:
        return
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Value, bool]] = [(value, False)]
    while stack:  # iterative post-order: a long chain of constant ops needs no recursion
        v, done = stack.pop()
        n = v.producer
        if n is None:
            raise VerifyError(f"{what}: expected a value of graph {graph.name!r} or one computed "
                              f"from constants, got {v!r}, which belongs to no graph")
        if done:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((v, True))
        for x in reversed(n.inputs):
            if x.graph is None:
                stack.append((x, False))
            elif x.graph is not graph:
                raise VerifyError(f"{what}: expected a value of graph {graph.name!r}, got "
                                  f"{v!r}, computed from %{x.name} of graph {x.graph.name!r}")
    for n in order:
        if all(o.graph is None for o in n.outputs):
            graph.append(n)


_GRAPH_STACK: list[Graph] = []


def current_graph() -> Graph | None:
    """The graph of the innermost ``with graph:`` block, if any."""
    return _GRAPH_STACK[-1] if _GRAPH_STACK else None


def as_array(array: Any, dtype: DType | str | None) -> np.ndarray:
    if isinstance(array, Value):
        raise VerifyError("constant: value: expected an array, got a graph value")
    try:
        a = np.array(array, dtype=DType.of(dtype).numpy if dtype is not None else None)
    except (TypeError, ValueError) as e:
        raise VerifyError(f"constant: value: expected an array of numbers, got {e}") from None
    return a
