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
- Parameters (API.md): every floating-point initializer, and every initializer also listed as a
  graph input, becomes a parameter of the same name where a node reads it as data (in the order
  of first use). One read only where an op needs a constant (shapes, axes, pads, scales, Clip
  bounds, ...) is folded into that op's attributes, as is any other constant; integer
  initializers that are not graph inputs stay constants.
- Static shape subgraphs (``import_shape.FOLDERS``: Shape, Gather, Unsqueeze, Concat, Cast,
  ConstantOfShape, Expand, ... of constants and of the static shapes of values) are evaluated at
  import, so that an attribute-like input computed by such a subgraph is a constant. A symbolic
  dim stays a symbol through them (``Reshape`` to ``(N, -1)`` imports); arithmetic on it does
  not fold. Float arithmetic of constants folds only where it derives from a shape.
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

import heapq
import os
from typing import Any

import numpy as np
import onnx

from gradc.errors import GradcError, ParseError, UnsupportedError, VerifyError
from gradc.ir import builders
from gradc.ir.core import Graph, Value
from gradc.ir.parser import parse_text
from gradc.ir.types import DType
from gradc.backends.onnx.format import (
    IR_HASH_KEY, IR_KEY, dtype_of, graph_digest, tensor_to_array,
)
from gradc.backends.onnx.import_node import CONVERTERS, OnnxNode
# Importing a converter module registers its converters.
from gradc.backends.onnx import import_ops, import_resize  # noqa: F401
from gradc.backends.onnx import import_math  # noqa: F401
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
from gradc.backends.onnx.import_rewrite import prepare
from gradc.backends.onnx.import_select import refusal
from gradc.backends.onnx.import_training import finish_rng_state
from gradc.backends.onnx.import_batch_norm import finish_running_statistics
from gradc.backends.onnx.import_shape import (
    ARITHMETIC, dims_of, fold_node, foldable, symbolic_error,
)

__all__ = ["from_onnx", "load_model"]


def from_onnx(model_or_path: Any) -> Graph:
    """Import a forward ONNX model (a ``ModelProto``, serialized bytes or a path) as a graph.

    A model written by ``gradc.to_onnx`` and not modified since comes back as exactly the graph
    that was exported (through the text IR it carries, see ``embedded_graph``).
    """
    model = load_model(model_or_path)
    own = embedded_graph(model)
    return own if own is not None else _Importer(prepare(model)).run()


def embedded_graph(model: Any) -> Graph | None:
    """The gradc graph embedded by ``to_onnx``, if the ONNX graph is still the one exported."""
    props = {p.key: p.value for p in model.metadata_props}
    if IR_KEY not in props or props.get(IR_HASH_KEY) != graph_digest(model.graph):
        return None
    try:
        values = {t.name: tensor_to_array(t, f"initializer {t.name!r}")
                  for t in model.graph.initializer}
        return parse_text(props[IR_KEY], values, extra_parameters=True)
    except GradcError as e:
        raise ParseError(f"ONNX model: its embedded gradc IR ({IR_KEY}) is invalid: {e}") from None


def load_model(src: Any) -> Any:
    """An ``onnx.ModelProto`` from a ModelProto, bytes or a path; GradcError when unreadable."""
    if isinstance(src, onnx.ModelProto):
        model = src
    elif isinstance(src, (bytes, bytearray, memoryview)):
        model = _parse(lambda: onnx.load_from_string(bytes(src)), "ONNX bytes")
    elif isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if not os.path.exists(path):
            raise ParseError(f"{path}: no such file")
        if os.path.isdir(path):
            raise ParseError(f"{path}: is a directory, not an ONNX file")
        model = _parse(lambda: onnx.load(path), path)
    else:
        raise VerifyError("from_onnx: model_or_path: expected an onnx.ModelProto, bytes or a "
                          f"path, got {type(src).__name__}")
    if not model.HasField("graph"):
        raise ParseError("ONNX model: not a model (it has no graph)")
    return model


def _parse(read: Any, what: str) -> Any:
    try:
        return read()
    except Exception as e:  # protobuf and onnx raise many kinds (DecodeError, OSError, ...)
        raise ParseError(f"{what}: not a readable ONNX model ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'no details'})") from None


class _Importer:
    """One import: the ONNX graph in, the gradc graph out."""

    def __init__(self, model: Any) -> None:
        self.proto = model.graph
        self.opset = _default_opset(model)
        self.graph = Graph(self.proto.name or "main")
        self.nodes = [OnnxNode(p, i) for i, p in enumerate(self.proto.node)]
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

    # -- the steps ------------------------------------------------------------------------
    def run(self) -> Graph:
        """Import the whole graph (see the module docstring)."""
        self._read_initializers()
        self._read_inputs()
        order = self._sort()
        self._check_outputs()
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
        return [self.nodes[i] for i in _topological(deps, self.nodes)]

    def _check_outputs(self) -> None:
        seen: set[str] = set()
        for vi in self.proto.output:
            if vi.name in seen:
                raise VerifyError(f"graph output {vi.name!r} is listed twice")
            seen.add(vi.name)
            if vi.name not in self.reserved:
                raise VerifyError(f"graph output {vi.name!r} is not defined (not a graph input, "
                                  "an initializer or a node output)")

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
            fold = CONVERTERS[n.op].fold if n.op in CONVERTERS else None
            try:
                arrays = _with_where(n, lambda: fold(n, self)) if fold else None
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
                      or (shape_work and n.op in ARITHMETIC and x in self.consts))
        if ok and shape_work:
            self.known_derived.update(o for o in n.outputs if o)
        return ok

    def _static_problems(self, n: OnnxNode) -> list[str]:
        if not n.domain and n.op not in CONVERTERS and self._will_fold(n):
            return []  # evaluated at import (import_shape)
        if n.domain:  # com.microsoft's fused ops and the like (SPEC-transformers §28.5)
            return [f"domain {n.domain} is not supported (export with the standard opset)"]
        if n.op not in CONVERTERS:
            return [refusal(n.op)]
        conv = CONVERTERS[n.op]
        found = [f"input {field} ({n.input(i)!r}) must be a constant (an initializer, a "
                 "Constant node or a static shape computation)" for i, field in conv.const_inputs
                 if n.input(i) and not self.is_const(n.input(i))]
        if conv.check is not None:
            try:
                found += _with_where(n, lambda: conv.check(n, self))
            except UnsupportedError as e:  # e.g. a constant that folds only in the second pass
                found.append(str(e))
        return found

    def _second_pass(self, order: list[OnnxNode], bad: set[int]) -> None:
        for n in order:
            skip = n.index in bad or any(x in self.failed for x in n.inputs if x)
            if skip or all(o in self.consts for o in n.outputs if o):
                if skip:
                    self.failed.update(o for o in n.outputs if o)
                continue
            if self._fold(n):
                continue
            if n.op not in CONVERTERS:
                self.problems.append((n.index, f"{n.where}: op {n.op} is supported only where "
                                      "its inputs are known at import (a static shape "
                                      "computation)"))
                self.failed.update(o for o in n.outputs if o)
                continue
            start = len(self.graph.nodes)
            try:
                outs = CONVERTERS[n.op].build(n, self)
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
        items = [msg for _, msg in sorted(self.problems, key=lambda p: p[0])]
        head = f"ONNX graph {self.graph.name!r}: {len(items)} unsupported " \
               f"feature{'s' if len(items) > 1 else ''}: "
        refused = {i for i, _ in self.problems if 0 <= i < len(self.nodes)}
        if len(refused) <= 1 and len(items) <= 20:
            head += "; ".join(items)
        else:  # one readable line grouped by op type first (the CLI prints only it), then all
            head += _summary(self.nodes, self.problems) + "\n" + "\n".join(items)
        e = UnsupportedError(head)
        e.problems = items  # type: ignore[attr-defined]
        raise e

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
            raise UnsupportedError(f"input {field} ({name!r}) must be a constant (an "
                                   "initializer, a Constant node or a static shape "
                                   "computation)")
        a = self.consts[name]
        if a.dtype == object:
            raise symbolic_error(f"input {field} ({name!r})", a)
        return a

    def dims(self, node: OnnxNode, index: int, field: str) -> list[int | str] | None:
        """A constant shape input whose entries may be symbolic dims (ints and symbol names)."""
        name = node.input(index)
        if not name:
            return None
        if name not in self.consts:
            raise UnsupportedError(f"input {field} ({name!r}) must be a constant (an "
                                   "initializer, a Constant node or a static shape "
                                   "computation)")
        return dims_of(self.consts[name], field)

    def shape_source(self, dims: tuple) -> Value | None:
        """A value of the graph with exactly these dims, read by a ``Shape`` node, if any."""
        return self.shape_sources.get(tuple(dims))

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
            raise symbolic_error(f"{what} ({name!r})", a)
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


def _with_where(n: OnnxNode, fn: Any) -> Any:
    """Run ``fn``; prefix a VerifyError with the node (the first pass's checks may raise one)."""
    try:
        return fn()
    except VerifyError as e:
        raise VerifyError(f"{n.where}: {e}") from None


def _default_opset(model: Any) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    if any(n.domain in ("", "ai.onnx") for n in model.graph.node):
        raise VerifyError("ONNX model: opset_import: expected a version for the default "
                          "domain, got none")
    return 0


def _topological(deps: list[set[int]], nodes: list[OnnxNode]) -> list[int]:
    """Kahn's algorithm, taking the lowest ready index first; VerifyError on a cycle."""
    users: list[list[int]] = [[] for _ in deps]
    waiting = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(deps):
        stuck = [nodes[i].where for i, w in enumerate(waiting) if w > 0]
        raise VerifyError(f"the ONNX graph has a cycle (nodes waiting on each other: "
                          f"{', '.join(stuck[:4])}{', ...' if len(stuck) > 4 else ''})")
    return order



def _summary(nodes: list[OnnxNode], problems: list[tuple[int, str]]) -> str:
    """Problems grouped by ONNX op type in model order: ``Where (30 nodes, first 'a/Where')``."""
    groups: dict[str, list[str]] = {}
    seen: set[int] = set()
    for index, _ in sorted(problems, key=lambda p: p[0]):
        if 0 <= index < len(nodes):
            if index in seen:
                continue  # a node with several problems counts once
            seen.add(index)
            n = nodes[index]
            groups.setdefault(n.op, []).append(n.name or f"#{n.index}")
        else:
            groups.setdefault("(graph inputs, outputs, initializers)", []).append("")
    parts = []
    for op, names in groups.items():
        count = f"{len(names)} node{'s' if len(names) > 1 else ''}"
        parts.append(f"{op} ({count}, first {names[0]!r})" if names[0] else f"{op} ({len(names)})")
    return ", ".join(parts) + " (the full message lists every feature, one per line: --debug)"
