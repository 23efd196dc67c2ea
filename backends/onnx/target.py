"""The ``"onnx"`` target: export a graph as standard ONNX and run it with onnxruntime (CPU).

The model uses default-domain operators only (opset 21, IR version 10), passes
``onnx.checker.check_model(model, full_check=True)``, keeps the graph's input and output names
and its symbolic dims (``dim_param``). Every ONNX node of a gradc node is named
``gradc.<op>.<n>/<OnnxOp>`` (``n``: the node's position; nodes of a fused group are named
``gradc.fused.<n>/<op>.<m>/<OnnxOp>``) and its ``doc_string`` names the gradc op. The first ONNX
node of each gradc node's group carries the group's tag (``format``: the gradc node and a
digest of the group), so that ``from_onnx`` raises an unedited group back into its gradc node
even where the model was edited elsewhere; the model's metadata holds the whole graph's text IR
and the digest of the whole ONNX graph, computed last, over the model as written.

Each lowering is an exact decomposition of SPEC.md. "bits": bit-identical to the reference
(-0.0 and NaN payloads included); "tol": within SPEC §1.6's tolerance (in practice it follows
the canonical order and rounding too, and matched bit for bit in every test run).

    gradc op          ONNX decomposition                                                 result
    relu              select(Greater(x, 0), x, +0)                                       bits
    relu_grad         select(Greater(x, 0), dy, +0)                                      bits
    clip              keep = LessOrEqual(x, max) & GreaterOrEqual(x, min);               bits
                      select(keep, x, select(LessOrEqual(x, max), min, max(min, max)))
    clip_grad         select(Or(LessOrEqual(x, min), GreaterOrEqual(x, max)), +0, dy)   bits
    slice             one Slice (negative steps; a whole symbolic axis as -1..INT64_MIN  bits
                      step -1), then a Gather per stride-0 axis
    slice_grad        per axis: Slice reversal (negative stride), Concat of Expand-ed    bits
                      zero slabs, and for |stride| > 1 a Gather from element or zero
    max_pooling       per spatial axis, innermost first: one strided Slice + Pad per     bits
                      tap landing in the input, running argmax in window order with
                      Greater/IsNaN and 1-D validity masks; values by GatherElements
                      from the input; flat indices from Range (see lower_pooling)
    max_pooling_grad  the same argmax; ScatterElements(add) of dy in float32/float64     tol
    resample nearest  Gather per axis whose index vector (axis_taps) is not identity     bits
    resample linear   per corner: Gathers, Mul by the float32 weight product, Add in     tol
                      corner order in ACC, Cast (int8/uint8: Abs/Floor half-away
                      rounding, Max/Min saturation); an If drops weight-0 taps when
                      the data is finite
    resample_grad     per corner: flat index (index * stride) and weighted dy, stacked   tol
                      as (element, corner), one ScatterElements(add), Reshape, Cast;
                      the same If fast path
    add, sub, mul     Add / Sub / Mul (integers wrap; float16 via float32, one rounding) bits*
    neg               Neg; unsigned Sub(0, x); float16 via float32                        bits*
    reduce_sum        floats: ReduceSum (float16 in float32); integers: Transpose,       tol /
                      Reshape, MatMul with ones (wraps; onnxruntime's integer ReduceSum  bits
                      accumulates in double and saturates)
    reshape, expand   Reshape / Expand; symbolic dims read with Shape from an input      bits
    cast              Cast (float64 -> float16 with a tie correction: onnxruntime        bits*
                      rounds through float32)
    identity          Identity; constant: an initializer                                 bits
    fused             the body's nodes, inlined under the group's name                   -

    * a NaN produced by arithmetic has no specified payload, and onnxruntime's float16 <->
      float32 conversions set a signalling NaN's quiet bit; every other bit matches.

select(c, a, b) is ``Where`` where onnxruntime's kernel copies exactly, else ``GatherElements``
over ``Concat(b, a)`` (see builder.py).

Two onnxruntime graph rewrites are not IEEE-exact, and the model is built so that a stock
session (all optimizations on) still computes SPEC's values: ``Where(Not(c), a, b)`` is never
emitted (NotWhereFusion swaps the branches back), and an ``Add``/``Sub``/``Mul`` with a
1-element constant that NoopElimination would drop wrongly (``x + 0.0`` keeps a -0.0) gets a
2-element constant (``lower_arith.safe_binary``). Nodes whose operands are all constants are
evaluated at export time with the reference when their result is small, so no constant that
onnxruntime folds escapes that check. ``build`` also turns NoopElimination off.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import onnx
from onnx import helper

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.backends.onnx.format import (
    GROUP_KEY, GroupTag, group_digest, members_by_scope, producers_of,
)
from gradc.backends.onnx.format import (
    ELEM_TYPES, IR_HASH_KEY, IR_KEY, IR_VERSION, OPSET, PRODUCER, array_to_tensor, graph_digest,
    producer_version,
)
from gradc.backends.onnx.lower_arith import lower_arith_table
from gradc.backends.onnx.lower_pooling import lower_pool_table
from gradc.backends.onnx.lower_resample import lower_resample_table
from gradc.backends.onnx.lower_math import lower_math_table
from gradc.backends.onnx.lower_reduce import lower_reduce_table
from gradc.backends.onnx.lower_movement import lower_movement_table
from gradc.backends.onnx.lower_conv import lower_conv_table
from gradc.backends.onnx.lower_gemm import lower_gemm_table
from gradc.backends.onnx.lower_batch_norm import lower_batch_norm_table
from gradc.backends.onnx.lower_training import lower_training_table
from gradc.backends.onnx.lower_activation import lower_activation_table
from gradc.backends.onnx.lower_normalization import index_error, lower_normalization_table
from gradc.backends.target import Lowered
from gradc.errors import GradcError, InputError, ResourceError, UnsupportedError, VerifyError
from gradc.ir.core import Graph, Node, Value, parameters_as_inputs
from gradc.ir.interpret import evaluate_node
from gradc.ir.verify import verify

LOWERINGS = {
    **lower_arith_table(), **lower_pool_table(), **lower_resample_table(),
    **lower_math_table(),
    **lower_reduce_table(),
    **lower_movement_table(),
    **lower_conv_table(),
    **lower_gemm_table(),
    **lower_batch_norm_table(),
    **lower_training_table(),
    **lower_activation_table(),
    **lower_normalization_table(),
}


def unsupported_ops(graph: Graph) -> list[str]:
    """The ops of the graph (fused bodies included) that the exporter has no lowering for."""
    missing: set[str] = set()
    for node in graph.nodes:
        if node.op == "fused" and node.body is not None:
            missing.update(unsupported_ops(node.body))
        elif node.op not in LOWERINGS:
            missing.add(node.op)
    return sorted(missing)


def _value_info(v: Value) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(v.name, ELEM_TYPES[v.type.dtype], list(v.type.shape))


def to_onnx(graph: Graph, weights_as_inputs: bool = True) -> onnx.ModelProto:
    """Export a graph as a standard-domain ONNX model (opset 21) that onnxruntime runs.

    Parameters become initializers of the same names, also listed as graph inputs (after the
    graph's own inputs), so that a caller may feed new values (a parameter without a value is
    an input alone). ``weights_as_inputs=False`` lists parameters that have a value as
    initializers only (a deployed model's constant weights: ``Trainer.export``).

    Every writer of ONNX goes through here: the embedded IR's digest is the last thing set, so
    the model read back is the model written (a change after it makes ``from_onnx`` distrust
    the embedded IR and import the ONNX nodes instead).
    """
    verify(graph)
    missing = unsupported_ops(graph)
    if missing:
        raise UnsupportedError(f"to_onnx: op: expected operators with an ONNX lowering, got "
                               f"{', '.join(missing)}")
    lifted = parameters_as_inputs(graph)
    model = _export(lifted)
    weights = {p.name: p.value for p in graph.parameters if p.value is not None}
    model.graph.initializer.extend(array_to_tensor(a, name) for name, a in weights.items())
    if not weights_as_inputs:
        kept = [v for v in model.graph.input if v.name not in weights]
        del model.graph.input[:]
        model.graph.input.extend(kept)
    helper.set_model_props(model, {IR_KEY: str(graph), IR_HASH_KEY: graph_digest(model.graph)})
    return model


def _export(graph: Graph) -> onnx.ModelProto:
    """The model of a graph without parameters (its metadata is set by ``to_onnx``)."""
    gb = OnnxGraphBuilder([v.name for v in graph.inputs] + [v.name for v in graph.outputs])
    env: dict[Value, Tensor] = {}
    for v in graph.inputs:
        t = Tensor(v.name, v.type.dtype, v.type.shape)
        env[v] = t
        gb.add_symbol_source(t)
    outputs = {v: v.name for v in graph.outputs}
    groups: list[_Group] = []
    for i, node in enumerate(graph.nodes):
        _lower_node(gb, node, f"gradc.{node.op}.{i}", env, outputs, groups)
    tagged = _tagged(gb, groups)
    # folded constants' operands go; a tagged group's operands stay, so that the importer can
    # raise the group on them even where its lowering read a converted copy instead
    used = _used_names(gb.nodes) | {v.name for v in graph.outputs} | {
        x for _, _, operands, _ in tagged for x in operands}
    inits = [t for t in gb.initializers if t.name in used]
    _tag_groups(tagged, gb.nodes, inits)
    g = helper.make_graph(gb.nodes, graph.name, [_value_info(v) for v in graph.inputs],
                          [_value_info(v) for v in graph.outputs], inits,
                          doc_string=f"exported by gradc from graph {graph.name!r}")
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name=PRODUCER,
                              producer_version=producer_version())
    return model


def _used_names(nodes: Any) -> set[str]:
    """Every tensor name read by the nodes, their subgraphs (``If`` branches) included."""
    out: set[str] = set()
    for n in nodes:
        out.update(n.input)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out |= _used_names(a.g.node) | {o.name for o in a.g.output}
    return out


@dataclass(frozen=True)
class _Group:
    """A lowered gradc node (not fused) and the ONNX names of its operands and results."""

    scope: str
    node: Node
    operands: tuple[str, ...]
    results: tuple[str, ...]


def _lower_node(gb: OnnxGraphBuilder, node: Node, scope: str, env: dict[Value, Tensor],
                outputs: Mapping[Value, str], groups: list[_Group], group: str = "") -> None:
    """Lower one node (a fused node: its body) and bind its results in ``env``."""
    start = len(gb.nodes)
    if node.op == "fused":
        assert node.body is not None
        inner: dict[Value, Tensor] = {b: env[a] for b, a in zip(node.body.inputs, node.inputs)}
        for j, sub in enumerate(node.body.nodes):
            _lower_node(gb, sub, f"{scope}/{sub.op}.{j}", inner, {}, groups, group=scope)
        results = [inner[v] for v in node.body.outputs]
    else:
        gb.scope = scope
        gb.doc = f"gradc op {node.op}" + (f" in fused group {group}" if group else "")
        args = [env[v] for v in node.inputs]
        results = _fold(gb, node, args) or LOWERINGS[node.op](gb, node, args)
        operands = tuple(t.name for t in args)
    produced = {out for n in gb.nodes[start:] for out in n.output}
    for v, t in zip(node.outputs, results):
        want = outputs.get(v)
        if want is not None and t.name != want:
            if t.name in produced and t.value is None:
                gb.rename(t.name, want, start)
            else:  # an operand, constant or earlier tensor: copy it under the output's name
                gb.scope, gb.doc = scope, f"gradc op {node.op}"
                t = gb.op("Identity", [t], t.dtype, t.shape)
                gb.rename(t.name, want, len(gb.nodes) - 1)
            t = Tensor(want, t.dtype, t.shape)
        env[v] = Tensor(t.name, v.type.dtype, v.type.shape, t.value)
    if node.op != "fused" and len(gb.nodes) > start:
        groups.append(_Group(scope, node, operands, tuple(env[v].name for v in node.outputs)))


_Tagged = tuple[_Group, list[Any], tuple[str, ...], tuple[str, ...]]


def _tagged(gb: OnnxGraphBuilder, groups: list[_Group]) -> list[_Tagged]:
    """The groups that get a tag, with their member nodes and the final names of their operands
    and results (the node list being final).

    A group with a result that no node of its own writes (a folded constant, an operand passed
    through) gets no tag: it has nothing that an importer would need to raise.
    """
    members = members_by_scope(gb.nodes, [g.scope for g in groups])
    out: list[_Tagged] = []
    for g in groups:
        nodes = members.get(g.scope, [])
        operands = tuple(gb.final_name(x) for x in g.operands)
        results = tuple(gb.final_name(x) for x in g.results)
        written = {o for n in nodes for o in n.output}
        if nodes and set(results) <= written:
            out.append((g, nodes, operands, results))
    return out


def _tag_groups(tagged: list[_Tagged], all_nodes: Any, inits: list[Any]) -> None:
    """Put each tagged group's tag on its first ONNX node (``format``)."""
    producers = producers_of(all_nodes)
    initializers = {t.name: t for t in inits}
    texts: dict[Any, str] = {}  # identical nodes (repeated layers) print once
    for g, nodes, operands, results in tagged:
        text = _cached_text(texts, g.node)
        digest = group_digest(g.scope, text, operands, results, nodes, initializers, producers,
                              OPSET)
        entry = nodes[0].metadata_props.add()
        entry.key = GROUP_KEY
        entry.value = GroupTag(g.scope, text, operands, results, digest).to_json()


def _cached_text(texts: dict[Any, str], node: Node) -> str:
    try:
        key = (node.op, tuple(v.type for v in node.inputs), tuple(node.attrs.items()))
        hash(key)
    except TypeError:  # an attribute that is no hashable value (an array): print it
        return _node_text(node)
    if key not in texts:
        texts[key] = _node_text(node)
    return texts[key]


def _node_text(node: Node) -> str:
    """A gradc node as the text IR of a graph holding it alone (inputs a0.., results r0..)."""
    g = Graph("node")
    args = [g.input(f"a{i}", v.type.dtype, v.type.shape) for i, v in enumerate(node.inputs)]
    copy = g.append(Node(node.op, args, node.attrs, [v.type for v in node.outputs]))
    for i, v in enumerate(copy.outputs):
        g.output(v, f"r{i}")
    return str(g)


FOLD_LIMIT = 4096  # elements; larger constant results are left to the lowering


def _fold(gb: OnnxGraphBuilder, node: Node, args: list[Tensor]) -> list[Tensor] | None:
    """Evaluate a node of constants with the reference at export time (small results only).

    The model then holds SPEC's values, and onnxruntime's own folding and NoopElimination
    never see a constant that the exporter did not (see ``safe_binary``).
    """
    if node.op == "constant" or not args or any(t.value is None for t in args[:1]):
        return None
    if node.op == "expand":
        like = node.inputs[1].type
        if like.size is None or like.size > FOLD_LIMIT:
            return None
        out = [np.broadcast_to(np.asarray(args[0].value), tuple(int(d) for d in like.shape))]
    elif any(t.value is None for t in args) or any(
            v.type.size is None or v.type.size > FOLD_LIMIT for v in node.outputs):
        return None
    else:
        with np.errstate(all="ignore"):
            out = evaluate_node(node, [np.asarray(t.value) for t in args], {})
    return [gb.const(np.asarray(a), v.type.dtype) for a, v in zip(out, node.outputs)]


MAX_THREADS = 4096  # a thread count beyond any machine (and within onnxruntime's int)


class OnnxRunner:
    """Runs an onnxruntime session; feeds and results keyed by the graph's names."""

    def __init__(self, session: Any, graph: Graph, make: Callable[[], Any] | None = None) -> None:
        self.session = session  # None: made by ``make`` at the first call
        self._make = make
        self.graph = graph
        self.inputs = [v.name for v in graph.inputs]
        self.outputs = [v.name for v in graph.outputs]

    def __call__(self, arrays: Mapping[str, np.ndarray],
                 bindings: Mapping[str, int]) -> dict[str, np.ndarray]:
        feeds = {n: np.require(arrays[n], requirements="C") for n in self.inputs}
        if self.session is None and self._make is not None:
            self.session = self._make()
        try:
            return dict(zip(self.outputs, self.session.run(self.outputs, feeds, _quiet())))
        except MemoryError:
            raise
        except Exception as exc:  # onnxruntime raises its own exception types
            text = str(exc)
            if "Failed to allocate memory" in text or "bad_alloc" in text:
                raise MemoryError(text) from None  # the Executable names the value and bytes
            bad = index_error(self.graph, arrays, bindings)  # onnxruntime refused an index
            if bad is not None:
                raise InputError(bad) from None
            raise GradcError(f"onnx target: onnxruntime failed while running the exported "
                             f"model: {text.splitlines()[0] if text else type(exc).__name__}"
                             ) from None


@functools.cache
def _quiet() -> Any:
    """Run options that keep onnxruntime from logging a failed run to stderr: the exception
    carries its message, and a refused index becomes an InputError (§26.3)."""
    import onnxruntime as ort  # lazy: loaded only when a session runs (a heavy import)

    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


def session(model: onnx.ModelProto, threads: int | None = None,
            optimize: bool = True) -> Any:
    """An onnxruntime CPU session for a model."""
    import onnxruntime as ort  # lazy: loaded only when a session is made (a heavy import)

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads is not None:
        so.intra_op_num_threads = threads
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:  # NoopElimination drops x + 0.0 (-0.0 + 0.0 is +0.0); see lower_arith.safe_binary
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"],
                                    disabled_optimizers=["NoopElimination"])
    except Exception as exc:  # onnxruntime raises its own exception types
        if "bad_alloc" in str(exc) or "Failed to allocate" in str(exc):
            raise ResourceError(f"onnx target: onnxruntime ran out of memory while preparing "
                                f"graph {model.graph.name!r} ({str(exc)[:200]})") from None
        raise GradcError(f"internal error: onnxruntime rejected the exported model: {exc}") from exc


class OnnxTarget:
    """The ``"onnx"`` target: the exported model run by a stock onnxruntime CPU session."""

    name: str = "onnx"
    exact: bool = False  # onnxruntime sums in its own order (SPEC.md §1.6 tolerances)
    artifact_kind: str | None = "ONNX model"

    def lowerings(self) -> frozenset[str]:
        """The ops with an ONNX lowering (fused groups are inlined)."""
        return frozenset(LOWERINGS) | {"fused"}

    def artifact(self, graph: Graph, shapes: Mapping[str, int]) -> bytes:
        """The serialized model."""
        return to_onnx(graph).SerializeToString()

    def lower(self, graph: Graph, shapes: Mapping[str, int], threads: int | None = None,
              optimize: bool = True, **options: Any) -> Lowered:
        """Export, and create the onnxruntime session once.

        ``threads``: onnxruntime's intra-op thread count (default: its own choice);
        ``optimize``: False turns onnxruntime's graph optimizations off.
        """
        unknown = sorted(options)
        if unknown:
            raise VerifyError(f"compile: {unknown[0]}: expected threads or optimize for target "
                              f"'onnx', got an unknown option {unknown[0]}={options[unknown[0]]!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or not 1 <= threads <= MAX_THREADS):
            raise VerifyError(f"compile: threads: expected an int in [1, {MAX_THREADS}] or None, "
                              f"got {threads!r}")
        graph = parameters_as_inputs(graph)  # the driver has done so; direct callers too
        model = to_onnx(graph)
        make = functools.partial(session, model, threads=threads, optimize=optimize)
        if _largest_static_bytes(graph) > LAZY_SESSION_BYTES:
            return Lowered(OnnxRunner(None, graph, make), model=model)
        return Lowered(OnnxRunner(make(), graph), model=model)


# onnxruntime's graph optimizers do work that grows with the tensors they see (it constant-folds
# up to 1 GiB per node): a graph holding a larger static value gets its session at the first
# call, after the Executable has checked that the call's values fit in memory at all.
LAZY_SESSION_BYTES = 1 << 30


def _largest_static_bytes(graph: Graph) -> int:
    values = list(graph.inputs) + [v for n in graph.nodes for v in n.outputs]
    return max((v.type.nbytes or 0 for v in values), default=0)


TARGET = OnnxTarget()
