"""Import a forward ONNX model as a gradc graph (``gradc.from_onnx``, SPEC.md §7).

The importer works in three steps:

1. load and check the model's structure (a cycle, an undefined input, a name defined twice,
   unreadable bytes: a ``ParseError`` or ``VerifyError``, never a protobuf traceback);
2. a first pass over every node collects each unsupported op, attribute and non-constant
   attribute input, and evaluates ``Constant`` nodes;
3. a second pass builds the gradc nodes; problems that need types (a dtype or rank the gradc op
   does not take, a symbolic dim where a size is needed) are collected too. All problems of both
   passes are raised together as one ``UnsupportedError`` (also listed in its ``problems``):
   when more than one node is refused, its first line groups them by op type
   (``Conv (20 nodes, first 'conv1'), Gemm (1 node, ...)``) and the lines after it list all.
   Arguments that gradc rejects raise ``VerifyError`` prefixed with the ONNX node.

Decisions:
- Value and graph names are the ONNX names (graph name ``model.graph.name`` or ``main``).
  Values gradc needs beyond ONNX's get ``<output>:<k>`` names that no ONNX value uses.
- Parameters: every floating-point initializer, and every initializer also listed as a
  graph input, becomes a parameter of the same name where a node reads it as data (in the order
  of first use). One read only where an op needs a constant (shapes, axes, pads, scales, Clip
  bounds, ...) is folded into that op's attributes, as is any other constant; integer
  initializers that are not graph inputs stay constants.
- Before anything reads a node of an op the importer knows, the node is held to its ONNX
  schema at the model's opset (``import_schema``: input and output counts, required inputs,
  attribute names, kinds and required ones): a malformed node is a ``VerifyError`` naming it.
- Static shape subgraphs (``import_shape.FOLDERS``: Shape, Gather, Unsqueeze, Concat, Cast,
  ConstantOfShape, Expand, Range, and ``import_fold``'s arithmetic, comparisons, logic and
  Trilu, of constants and of the static shapes of values) are evaluated at import, so that an
  attribute-like input computed by such a subgraph is a constant. The elements of ``Shape`` at
  static dims are known even where other dims are symbolic (SPEC-transformers §28.2); a
  symbolic dim stays a symbol through them (``Reshape`` to ``(N, -1)`` and ``(N, T, 4, C // 4)``
  import); arithmetic needing its value does not fold, and a node that needs it is refused
  naming the symbol. Float arithmetic of constants folds only where it derives from a shape.
- The groups of ONNX nodes that gradc's exporter wrote and tagged are raised back into their
  gradc nodes where unedited (``import_groups``), before everything else.
- A dim with ``dim_param`` becomes that symbol; a dim with neither value nor param gets a fresh
  symbol ``unk__<k>``; a dim of 0 is unsupported (gradc has no empty tensors).
- ``Identity`` (and a ``ReduceSum`` that is a no-op) alias their input; a graph output named by
  such an alias still gets its ONNX name (via an ``identity`` node when needed).
- Constants (initializers, ``Constant`` nodes) are kept as arrays and become ``constant`` nodes
  only where a gradc op uses them as a tensor, so empty constants can still act as attributes.
- ``value_info`` and output types are not used; ONNX shape inference is not run.
- A missing file or bytes that are not an ONNX model raise ``ParseError``; a bad argument, a
  structurally invalid graph or unreadable tensor data raise ``VerifyError``. Tensor data in an
  external file is read only by ``onnx.load`` from a path (the model's folder), never from bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradc.errors import GradcError, UnsupportedError, VerifyError
from gradc.ir import builders
from gradc.ir.core import Graph, Value
from gradc.ir.types import DType
from gradc.backends.onnx.format import dtype_of, tensor_to_array
from gradc.backends.onnx.import_node import CONVERTERS, Converter, OnnxNode
from gradc.backends.onnx.import_model import (
    Pending, default_opset, embedded_graph, load_model, summary, topological,
)
from gradc.backends.onnx.import_groups import RaisedNode, build_raised, raise_groups
# Importing a converter module registers its converters.
from gradc.backends.onnx import import_ops, import_resize  # noqa: F401
from gradc.backends.onnx import import_math  # noqa: F401
from gradc.backends.onnx import import_logic  # noqa: F401
from gradc.backends.onnx import import_fold  # noqa: F401
from gradc.backends.onnx import import_reduce  # noqa: F401
from gradc.backends.onnx import import_movement  # noqa: F401
from gradc.backends.onnx import import_conv  # noqa: F401
from gradc.backends.onnx import import_gemm  # noqa: F401
from gradc.backends.onnx import import_batch_norm  # noqa: F401
from gradc.backends.onnx import import_training  # noqa: F401
from gradc.backends.onnx import import_activation  # noqa: F401
from gradc.backends.onnx import import_normalization  # noqa: F401
# Transformer imports (SPEC-transformers §28): rewrites before the import, selections, refusals.
from gradc.backends.onnx import import_attention, import_select, import_sequence  # noqa: F401
from gradc.backends.onnx.import_rewrite import REWRITES, prepare
from gradc.backends.onnx.import_select import refusal
from gradc.backends.onnx.import_training import finish_rng_state
from gradc.backends.onnx.import_batch_norm import finish_running_statistics
from gradc.backends.onnx.import_schema import check_node
from gradc.backends.onnx.import_shape import (
    FOLDERS, NUMERIC, dims_of, fold_node, foldable, symbolic_error,
)

__all__ = ["from_onnx", "load_model", "embedded_graph"]


def from_onnx(model_or_path: Any) -> Graph:
    """Import a forward ONNX model (a ``ModelProto``, serialized bytes or a path) as a graph.

    A model written by ``gradc.to_onnx`` and not modified since comes back as exactly the graph
    that was exported (through the text IR it carries, see ``embedded_graph``).
    """
    model = load_model(model_or_path)
    own = embedded_graph(model)
    return own if own is not None else _Importer(prepare(model)).run()


class _Importer:
    """One import: the ONNX graph in, the gradc graph out."""

    def __init__(self, model: Any) -> None:
        self.proto = model.graph
        self.opset = default_opset(model)
        self.graph = Graph(self.proto.name or "main")
        nodes = [OnnxNode(p, i) for i, p in enumerate(self.proto.node)]
        # intact groups of a gradc export become their gradc nodes (import_groups)
        self.nodes, self.edited = raise_groups(nodes, self.proto, self.opset)
        self.consts: dict[str, np.ndarray] = {}
        self.candidates: set[str] = set()  # initializers that are parameters where read as data
        self.known: set[str] = set()  # values that import_shape folds (first pass: optimistic)
        self.derived: set[str] = set()  # folded values computed from a shape
        self.known_derived: set[str] = set()  # first pass: will be, optimistically
        self.shape_sources: dict[tuple, Value] = {}  # a value of each shape that Shape read
        self.env: dict[str, Value] = {}
        self.failed: set[str] = set()
        self.problems: list[tuple[int, str]] = []
        self.named: set[int] = set()
        self.reserved: set[str] = set()
        self.temps = 0
        self.pending: set[int] = set()  # nodes whose static check needs a value of pass two
        self.second_pass = False

    # -- the steps ------------------------------------------------------------------------
    def run(self) -> Graph:
        """Import the whole graph (see the module docstring)."""
        self._read_initializers()
        self._read_inputs()
        order = self._sort()
        self._check_outputs()
        self._check_schemas(order)
        bad = self._first_pass(order)
        self._second_pass(order, bad)
        self._mark_outputs()
        finish_rng_state(self)  # the state output of training-mode Dropouts (SPEC-training §21)
        finish_running_statistics(self)  # <running stat>.next of training-mode BatchNorms
        if self.problems:
            self._raise_problems()
        return self.graph

    def _read_initializers(self) -> None:
        for t in self.proto.initializer:
            if t.name in self.consts:
                raise VerifyError(f"initializer {t.name!r} is defined twice")
            try:
                self.consts[t.name] = tensor_to_array(t, f"initializer {t.name!r}")
                if self.consts[t.name].dtype.kind == "f":
                    self.candidates.add(t.name)
            except UnsupportedError as e:
                self.problems.append((-1, str(e)))
                self.failed.add(t.name)
        for t in self.proto.sparse_initializer:
            self.problems.append((-1, f"sparse initializer {t.values.name!r} is not supported"))
            self.failed.add(t.values.name)

    def _read_inputs(self) -> None:
        params = {d.dim_param for vi in self.proto.input if vi.type.HasField("tensor_type")
                  for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")}
        seen: set[str] = set()
        for vi in self.proto.input:
            if vi.name in seen or not vi.name:
                raise VerifyError(f"graph input {vi.name!r}: expected a unique non-empty name")
            seen.add(vi.name)
            if vi.name in self.consts or vi.name in self.failed:
                if vi.name in self.consts:
                    self.candidates.add(vi.name)  # a parameter (module docstring)
                continue
            try:
                dtype, shape = self._input_type(vi, params)
            except UnsupportedError as e:
                self.problems.append((-1, f"graph input {vi.name!r}: {e}"))
                self.failed.add(vi.name)
                continue
            v = self.graph.input(vi.name, dtype, shape)
            self.env[vi.name] = v
            self.named.add(id(v))

    def _input_type(self, vi: Any, params: set[str]) -> tuple[DType, tuple]:
        t = vi.type
        if t.WhichOneof("value") != "tensor_type":
            raise UnsupportedError(f"type {t.WhichOneof('value') or 'missing'} is not supported "
                                   "(only tensors)")
        dtype = dtype_of(t.tensor_type.elem_type)
        if not t.tensor_type.HasField("shape"):
            raise UnsupportedError("its rank is unknown (no shape)")
        shape: list[int | str] = []
        for i, d in enumerate(t.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    raise VerifyError(f"graph input {vi.name!r}: shape[{i}]: expected a size "
                                      f">= 0, got {d.dim_value}")
                if d.dim_value == 0:
                    raise UnsupportedError(f"shape[{i}] is 0 (gradc has no empty tensors)")
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                shape.append(d.dim_param)
            else:
                shape.append(self._fresh_symbol(params))
        return dtype, tuple(shape)

    def _fresh_symbol(self, params: set[str]) -> str:
        k = 0
        while f"unk__{k}" in params:
            k += 1
        params.add(f"unk__{k}")
        return f"unk__{k}"

    def _sort(self) -> list[OnnxNode]:
        """The nodes in a topological order (ONNX order where possible); structural checks."""
        defined = {vi.name for vi in self.proto.input} | set(self.consts) | self.failed
        self.reserved = set(defined)
        producer: dict[str, int] = {}
        for n in self.nodes:
            for o in n.outputs:
                if not o:
                    continue
                if o in defined or o in producer:
                    raise VerifyError(f"{n.where}: output {o!r} is defined twice (names must be "
                                      "unique in an ONNX graph)")
                producer[o] = n.index
        self.reserved |= set(producer)
        deps: list[set[int]] = []
        for n in self.nodes:
            for name in n.inputs:
                if name and name not in defined and name not in producer:
                    raise VerifyError(f"{n.where}: input {name!r} is not defined (not a graph "
                                      "input, an initializer or a node output)")
            deps.append({producer[x] for x in n.inputs if x in producer})
        return [self.nodes[i] for i in topological(deps, self.nodes)]

    def _check_outputs(self) -> None:
        seen: set[str] = set()
        for vi in self.proto.output:
            if vi.name in seen:
                raise VerifyError(f"graph output {vi.name!r} is listed twice")
            seen.add(vi.name)
            if vi.name not in self.reserved:
                raise VerifyError(f"graph output {vi.name!r} is not defined (not a graph input, "
                                  "an initializer or a node output)")

    def _check_schemas(self, order: list[OnnxNode]) -> None:
        """Every node of an op the importer knows has the inputs, outputs and attributes of its
        ONNX schema (``import_schema``), before any converter or fold reads it."""
        for n in order:
            if isinstance(n, RaisedNode) or n.domain:
                continue
            if n.op in CONVERTERS or n.op in FOLDERS or n.op in REWRITES:
                _with_where(n, lambda: check_node(n, self.opset))

    def _first_pass(self, order: list[OnnxNode]) -> set[int]:
        """Collect the static problems of every node; evaluate constant nodes."""
        bad: set[int] = set()
        for n in order:
            found = self._static_problems(n)
            for msg in found:
                self.problems.append((n.index, f"{n.where}: {msg}"))
            if found:
                bad.add(n.index)
                continue
            conv = self._converter(n)
            fold = conv.fold if conv is not None else None
            try:
                arrays = _with_where(n, lambda: fold(n, self)) if fold else None
            except Pending:
                arrays = None  # folds in the second pass, with its input
            except UnsupportedError as e:
                self.problems.append((n.index, f"{n.where}: {e}"))
                bad.add(n.index)
                continue
            if arrays is not None:
                self._store_folded(n, arrays)
            elif self._will_fold(n):
                self.known.update(o for o in n.outputs if o)
                self._fold_early(n)
        return bad

    def _fold_early(self, n: OnnxNode) -> None:
        """Fold now what needs no types of built values (so that the static checks that follow
        see the value); the rest folds in the second pass, where its errors are reported."""
        try:
            arrays = fold_node(n, self)
        except GradcError:
            return
        if arrays is not None:
            self._store_folded(n, arrays)

    def _will_fold(self, n: OnnxNode) -> bool:
        """First pass: whether ``import_shape`` will evaluate the node (as ``fold_node`` does:
        constants that are no parameters, values folded before, any constant in shape work)."""
        shape_work = n.op in ("Shape", "Size") or any(
            x in self.known_derived or x in self.derived for x in n.inputs if x)
        ok = foldable(n, lambda x: self.is_fixed(x) or x in self.known
                      or (shape_work and n.op in NUMERIC and x in self.consts))
        if ok and shape_work:
            self.known_derived.update(o for o in n.outputs if o)
        return ok

    def _converter(self, n: OnnxNode) -> Converter | None:
        """How the node imports: a raised gradc group, or its op type's converter."""
        if isinstance(n, RaisedNode):
            return RAISED
        return None if n.domain else CONVERTERS.get(n.op)

    def _static_problems(self, n: OnnxNode) -> list[str]:
        conv = self._converter(n)
        if conv is None and not n.domain and self._will_fold(n):
            return []  # evaluated at import (import_shape)
        if n.domain:  # com.microsoft's fused ops and the like (SPEC-transformers §28.5)
            return [f"domain {n.domain} is not supported (export with the standard opset)"]
        if conv is None:
            return [refusal(n.op)]
        found = [f"input {field} ({n.input(i)!r}) must be a constant (an initializer, a "
                 "Constant node or a static shape computation)" for i, field in conv.const_inputs
                 if n.input(i) and not self.is_const(n.input(i))]
        if conv.check is not None:
            try:
                found += _with_where(n, lambda: conv.check(n, self))
            except Pending:  # an input known only in the second pass: checked there
                self.pending.add(n.index)
            except UnsupportedError as e:
                found.append(str(e))
        return found

    def _second_pass(self, order: list[OnnxNode], bad: set[int]) -> None:
        self.second_pass = True
        for n in order:
            skip = n.index in bad or any(x in self.failed for x in n.inputs if x)
            if skip or all(o in self.consts for o in n.outputs if o):
                if skip:
                    self.failed.update(o for o in n.outputs if o)
                continue
            if self._fold(n):
                continue
            conv = self._converter(n)
            if conv is None:
                self.problems.append((n.index, f"{n.where}: op {n.op} is supported only where "
                                      "its inputs are known at import (a static shape "
                                      "computation)"))
                self.failed.update(o for o in n.outputs if o)
                continue
            start = len(self.graph.nodes)
            try:
                if n.index in self.pending and conv.check is not None:
                    found = _with_where(n, lambda: conv.check(n, self))  # type: ignore[misc]
                    if found:
                        raise UnsupportedError("; ".join(found))
                outs = conv.build(n, self)
                self._bind(n, outs, start)
            except UnsupportedError as e:
                self.problems.append((n.index, f"{n.where}: {e}"))
                self._fail(n, start)
            except VerifyError as e:
                if not self.problems:
                    raise VerifyError(f"{n.where}: {e}") from None
                self._fail(n, start)  # the unsupported features are the news; this may follow

    def _fold(self, n: OnnxNode) -> bool:
        """Evaluate a static shape computation at import (``import_shape``); True when done."""
        try:
            arrays = _with_where(n, lambda: fold_node(n, self))
        except UnsupportedError as e:
            self.problems.append((n.index, f"{n.where}: {e}"))
            self.failed.update(o for o in n.outputs if o)
            return True
        if arrays is None:
            return False
        self._store_folded(n, arrays)
        return True

    def _store_folded(self, n: OnnxNode, arrays: list[np.ndarray]) -> None:
        from_shape = n.op in ("Shape", "Size") or any(x in self.derived for x in n.inputs if x)
        for name, a in zip(n.outputs, arrays):
            if name:
                self.consts[name] = a
                if from_shape:
                    self.derived.add(name)

    def _fail(self, n: OnnxNode, start: int) -> None:
        """Mark the node's outputs failed; keep the names of values it left behind unique."""
        self.failed.update(o for o in n.outputs if o)
        self._name_temps(n, start)

    def _bind(self, n: OnnxNode, outs: Any, start: int) -> None:
        """Give the node's results their ONNX names; name the other new values uniquely."""
        for i, name in enumerate(n.outputs):
            v = outs[i] if i < len(outs) else None
            if not name:
                continue
            if v is None:
                raise VerifyError(f"output {i} ({name!r}): expected at most {len(outs)} "
                                  f"output{'s' if len(outs) != 1 else ''}, got {len(n.outputs)}")
            if isinstance(v, np.ndarray):
                self.consts[name] = v
                continue
            if id(v) not in self.named:
                self._free_name(name, start)
                self.graph.rename(v, name)
                self.named.add(id(v))
            self.env[name] = v
        self._name_temps(n, start)

    def _free_name(self, name: str, start: int) -> None:
        """Move a new value whose automatic name (a counter, "9") is the ONNX output name
        ``name`` (TorchScript exports name values by numbers) to a temporary name."""
        for node in self.graph.nodes[start:]:
            for v in node.outputs:
                if v.name == name and id(v) not in self.named:
                    self.graph.rename(v, self._temp_name(name))

    def _name_temps(self, n: OnnxNode, start: int) -> None:
        base = next((o for o in n.outputs if o), n.op)
        for node in self.graph.nodes[start:]:
            for v in node.outputs:
                if id(v) not in self.named:
                    self.graph.rename(v, self._temp_name(base))
                    self.named.add(id(v))

    def _temp_name(self, base: str) -> str:
        while f"{base}:{self.temps}" in self.reserved:
            self.temps += 1
        self.reserved.add(f"{base}:{self.temps}")
        return f"{base}:{self.temps}"

    def _mark_outputs(self) -> None:
        inputs = {v.name for v in self.graph.inputs}
        for vi in self.proto.output:
            if vi.name in self.failed:
                continue
            if vi.name not in self.env:
                self.candidates.discard(vi.name)  # an initializer no node reads: a constant
            try:
                v = self._value_of(vi.name, "graph output")
            except UnsupportedError as e:
                self.problems.append((len(self.nodes), f"graph output {vi.name!r}: {e}"))
                continue
            if vi.name in inputs or (v.producer is None and v.name == vi.name):
                what = "input" if vi.name in inputs else "parameter"
                self.problems.append((len(self.nodes), f"graph output {vi.name!r} is the graph "
                                      f"{what} of that name (gradc needs distinct names)"))
                continue
            self.graph.output(v, vi.name)

    def _raise_problems(self) -> None:
        items = [self._noted(i, msg) for i, msg in sorted(self.problems, key=lambda p: p[0])]
        head = f"ONNX graph {self.graph.name!r}: {len(items)} unsupported " \
               f"feature{'s' if len(items) > 1 else ''}: "
        refused = {i for i, _ in self.problems if 0 <= i < len(self.nodes)}
        if len(refused) <= 1 and len(items) <= 20:
            head += "; ".join(items)
        else:  # one readable line grouped by op type first (the CLI prints only it), then all
            head += summary(self.nodes, self.problems) + "\n" + "\n".join(items)
        e = UnsupportedError(head)
        e.problems = items  # type: ignore[attr-defined]
        raise e

    def _noted(self, index: int, msg: str) -> str:
        """A problem of a node from an edited group of a gradc export names that group."""
        if 0 <= index < len(self.nodes) and self.nodes[index].name in self.edited:
            return f"{msg} ({self.edited[self.nodes[index].name]})"
        return msg

    # -- the Context protocol of the converters ---------------------------------------------
    def is_const(self, name: str) -> bool:
        """True if the ONNX value is an initializer, a constant node's output, or folded at
        import (in the first pass: will be folded, see ``import_shape``)."""
        return name in self.consts or name in self.known

    def is_fixed(self, name: str) -> bool:
        """True if the value is a constant that is no parameter: a node of it may be folded."""
        return name in self.consts and name not in self.candidates

    def const(self, node: OnnxNode, index: int, field: str) -> np.ndarray | None:
        """The array of a constant input, None when absent."""
        name = node.input(index)
        if not name:
            return None
        if name not in self.consts:
            self._not_const(name, field)
        a = self.consts[name]
        if a.dtype == object:
            raise symbolic_error(f"input {field}", a)
        return a

    def dims(self, node: OnnxNode, index: int, field: str) -> list[int | str] | None:
        """A constant shape input whose entries may be symbolic dims (ints and symbol names)."""
        name = node.input(index)
        if not name:
            return None
        if name not in self.consts:
            self._not_const(name, field)
        return dims_of(self.consts[name], field)

    def _not_const(self, name: str, field: str) -> None:
        if name in self.known and not self.second_pass:
            raise Pending(f"input {field} ({name!r}) is known only once its producer has "
                          "been folded")
        raise UnsupportedError(f"input {field} ({name!r}) must be a constant (an initializer, "
                               "a Constant node or a static shape computation)")

    def shape_source(self, dims: tuple) -> Value | None:
        """A value of the graph with exactly these dims, read by a ``Shape`` node, if any."""
        return self.shape_sources.get(tuple(dims))

    def symbol_carrier(self, symbol: str) -> tuple[Value, int] | None:
        """A value with the symbolic dim (one a Shape node read first, then a graph input, then
        any value built so far), and its axis."""
        values = list(self.shape_sources.values()) + list(self.graph.inputs) + list(
            self.env.values())
        for v in values:
            if symbol in v.type.shape:
                return v, v.type.shape.index(symbol)
        return None

    def value_type(self, name: str) -> Any:
        """The gradc type of a built value or a constant (a Shape node reads it); None else."""
        if name in self.env:
            return self.env[name].type
        return None

    def value(self, node: OnnxNode, index: int, field: str) -> Value:
        """The gradc value of a required input."""
        name = node.input(index)
        if not name:
            raise VerifyError(f"input {field}: expected a value (required input), got none")
        return self._value_of(name, f"input {field}")

    def _value_of(self, name: str, what: str) -> Value:
        if name in self.env:
            return self.env[name]
        a = self.consts[name]
        if a.dtype == object:
            raise symbolic_error(what, a)
        if a.size == 0:
            raise UnsupportedError(f"{what} ({name!r}) is an empty tensor (shape "
                                   f"{list(a.shape)}); gradc has no empty tensors")
        if a.ndim > 8:
            raise UnsupportedError(f"{what} ({name!r}) has rank {a.ndim} (gradc: at most 8)")
        if name in self.candidates:
            p = self.graph.add_parameter(name, np.array(a, order="C"))  # own copy, 0-d kept
            self.named.add(id(p))
            self.env[name] = p
            return p
        v = builders.constant(a, graph=self.graph)
        self.graph.rename(v, name)
        self.named.add(id(v))
        self.env[name] = v
        return v


RAISED = Converter(build_raised)  # type: ignore[arg-type]  # its build takes a RaisedNode


def _with_where(n: OnnxNode, fn: Any) -> Any:
    """Run ``fn``; prefix a VerifyError with the node (the first pass's checks may raise one)."""
    try:
        return fn()
    except VerifyError as e:
        raise VerifyError(f"{n.where}: {e}") from None


