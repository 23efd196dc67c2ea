"""The schedule and memory plan of a compiled target: what the C and CUDA targets share.

A compiled target runs a graph as a sequence of kernels over buffers. What that sequence is and
where each value lives does not depend on how a kernel is written, so it is planned here, once,
for every such target (``backends/c``, ``backends/cuda``); a target keeps only what is its own
(how a kernel is written, compiled, loaded and launched) and names the buffers of the plan in
its own text. The stages, in the order a target runs them:

- ``flatten``: the kernels in graph order. A legal fused group (``gradc.ir.fused``) is one
  kernel; the nodes of any other fused node are inlined, their values aliased to the outer ones.
- ``fold_output_reshapes`` (optional): a reshape into a graph output becomes its operand's
  producer writing into the output's buffer (no copy kernel).
- ``relu_epilogues`` (optional): a relu of a forward convolution's result runs as the
  convolution's epilogue.
- ``hoist_sinks``: kernels that only feed the graph's outputs (a parameter's update), and small
  ones, move up to just after what they read; or (``sinks_last``) the former all go last.
- ``plan_in_place``: which outputs are written into an input's buffer (``update_in_place``),
  moving a writer down after the last reader of the buffer it overwrites.
- ``assign_buffers``: a buffer per value (inputs, outputs, temporaries ``b0``, ``b1``, ...,
  constants), ``reshape`` as a view of its operand, an elementwise result written over a dying
  operand's temporary (``take over``), and the lifetime of each temporary in kernel steps.
- ``plan_arena``: offsets of the temporaries in one arena from their lifetimes.

What a target's kernels guarantee about reading before writing (needed to overwrite an operand)
is asked through ``KernelTraits``; nothing here knows a target's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from gradc.errors import ResourceError

from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import anchors_group, violations
from gradc.ir.ops.registry import get_op
from gradc.ir.types import MAX_BYTES, Dim, fmt_bytes


class KernelTraits(Protocol):
    """What a target's kernels guarantee, as far as the memory plan needs to know."""

    def elementwise(self, n: Node) -> bool:
        """True when kernel ``n`` loads each element of its operands before it stores that
        element (so its result may overwrite an operand of the result's shape)."""
        ...

    def reads_all_first(self, n: Node, out: Value) -> bool:
        """True when kernel ``n`` reads all of its operands before it stores ``out`` (a state
        update such as ``random_generator``'s next state, which may overwrite its state)."""
        ...


class Sizes:
    """Dims known at compile time: integers, and symbols bound by ``shapes``."""

    def __init__(self, shapes: Mapping[str, int]) -> None:
        self.fixed = dict(shapes)

    def static(self, d: Dim) -> int | None:
        """The value of a dim known at compile time, else None."""
        if isinstance(d, str):
            return self.fixed.get(d)
        return int(d)

    def same(self, a: Dim, b: Dim) -> bool:
        """True when two dims are equal as written (or both static and equal)."""
        if a == b:
            return True
        sa, sb = self.static(a), self.static(b)
        return sa is not None and sa == sb

    def prod_static(self, dims: Sequence[Dim]) -> int | None:
        """The product of dims if every one is static."""
        out = 1
        for d in dims:
            s = self.static(d)
            if s is None:
                return None
            out *= s
        return out


@dataclass
class Plan:
    """The kernels in the order they run, and the values that are other values."""

    sizes: Sizes
    alias: dict[Value, Value] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    epilogue: dict[Node, str] = field(default_factory=dict)  # kernel -> op applied as it stores

    def resolve(self, v: Value) -> Value:
        """The value that ``v`` is (through the aliases of inlined bodies and epilogues)."""
        seen = 0
        while v in self.alias and seen < 10_000:
            v, seen = self.alias[v], seen + 1
        return v


def group_ok(n: Node, sizes: Sizes) -> bool:
    """True when a fused node is a legal group (``gradc.ir.fused``) that runs as one kernel."""
    kind = n.attrs.get("kind")
    return (kind == "elementwise" or anchors_group(kind)) and not violations(n, sizes)


def flatten(g: Graph, plan: Plan) -> None:
    """Append ``g``'s kernels to ``plan.nodes``: legal fused groups whole, others inlined."""
    for n in g.nodes:
        if n.body is not None and not group_ok(n, plan.sizes):
            for bi, oi in zip(n.body.inputs, n.inputs):
                plan.alias[bi] = oi
            flatten(n.body, plan)
            for oo, bo in zip(n.outputs, n.body.outputs):
                plan.alias[oo] = bo
        else:
            plan.nodes.append(n)


def fold_output_reshapes(graph: Graph, plan: Plan) -> None:
    """Makes each ``reshape`` kernel that only copies a kernel's result into a graph output
    a view the other way round: the producing kernel writes its result straight into the
    output's buffer (an output, or the input slot it updates in place), and the reshape is
    dropped from ``plan.nodes``. A reshape of an output is otherwise a copy kernel (a view of
    its operand would leave the output in a temporary), and a training step has many: the
    running statistics' updates, computed in the batch norm's parameter shape.

    Folded when the reshape's operand is the result of a kernel of ``plan.nodes`` that is no
    graph output itself, no other reshape folds onto it, and the output is the graph's
    only output with that value. Buffers are flat: the producer's elements land where the
    reshape would have copied them. Call after ``flatten``, before the other stages.
    """
    outs = [plan.resolve(v) for v in graph.outputs]
    out_set = set(outs)
    kernels = set(plan.nodes)
    folded: set[Value] = set()
    keep: list[Node] = []
    for n in plan.nodes:
        o = n.outputs[0] if n.op == "reshape" else None
        u = plan.resolve(n.inputs[0]) if o is not None else None
        if (o is None or u is None or o not in out_set or outs.count(o) != 1
                or u.producer is None or u.producer not in kernels
                or u.producer.op in ("constant", "reshape") or u in out_set or u in folded):
            keep.append(n)
            continue
        plan.alias[o] = u
        folded.add(u)
    plan.nodes[:] = keep


def relu_epilogues(graph: Graph, plan: Plan) -> None:
    """A relu whose operand is a forward convolution's float32/float64 result that nothing else
    reads runs as that convolution's epilogue: the kernel stores ``v > 0 ? v : +0`` (the relu
    kernel's own expression) for each finished sum ``v`` (after the bias), and the relu's result
    becomes an alias of the convolution's. One pass over the result fewer (squeezenet's layers).
    The target's convolution kernels read ``plan.epilogue``.
    """
    outs = {plan.resolve(v) for v in graph.outputs}
    readers: dict[Value, int] = {}
    for n in plan.nodes:
        for u in n.inputs:
            r = plan.resolve(u)
            readers[r] = readers.get(r, 0) + 1
    kernels = set(plan.nodes)
    drop = []
    for n in plan.nodes:
        if n.op != "relu" or n.body is not None:
            continue
        u = plan.resolve(n.inputs[0])
        c = u.producer
        if (c is None or c not in kernels or c.op != "convolution" or c in plan.epilogue
                or c.attrs.get("direction") != "forward" or readers.get(u) != 1 or u in outs
                or u.type != n.outputs[0].type
                or u.type.dtype.name not in ("float32", "float64")):
            continue
        plan.epilogue[c] = "relu"
        plan.alias[n.outputs[0]] = u
        drop.append(n)
    dropped = set(drop)
    plan.nodes[:] = [n for n in plan.nodes if n not in dropped]


SMALL_RESULTS = 1024  # elements: a kernel whose results are all this small runs early


def sinks_last(plan: Plan) -> None:
    """Moves every kernel whose results no other kernel reads (the updates of parameters,
    optimizer state and running statistics) after all the others, each part keeping its order.
    A target that runs such kernels as one launch (the cuda target: a launch costs as much as
    a small update) finds them together; their operands stay live to the end of the step.

    A kernel that may raise an input error stays in place: the checks run in the graph's
    order, so the error a call raises is the first failing node's, the reference's (fuzz seed
    9797: a gather whose result was only an output moved after its gradient's gather_grad,
    whose check then named the error)."""
    read = {plan.resolve(u) for n in plan.nodes for u in n.inputs}

    def sink(n: Node) -> bool:
        return bool(n.outputs) and not any(v in read for v in n.outputs) and not raises([n])
    plan.nodes[:] = [n for n in plan.nodes if not sink(n)] + [n for n in plan.nodes if sink(n)]


def hoist_sinks(plan: Plan, sinks: bool = True) -> None:
    """Moves each kernel whose results no other kernel reads (the graph's outputs only: an
    optimizer's update of a parameter and its moments, a returned gradient), and each kernel
    whose results are small (``SMALL_RESULTS`` elements in all, static), up to just after the
    last kernel it depends on; the others keep their order.

    A training step's updates come last in its graph, long after the backward pass produced
    their gradients; run there, each re-reads its gradient from memory, and the gradient's
    buffer stays live to the end of the step. Run early, the gradient (and the parameter, which
    the backward has just read) are still in cache and the gradient's buffer is freed at once.
    The small kernels are what the updates share (the bias corrections of the step number) or
    reduce a large value to (a bias gradient); moved up, no value but their small results lives
    longer. ``plan_in_place`` may still move an update down, after the last reader of the
    buffer it overwrites.

    ``sinks=False`` moves only the small kernels that other kernels read (for ``sinks_last``).
    A kernel that may raise an input error is never moved: the checks keep the graph's order.

    The order stays topological: a moved kernel follows its dependencies (fixed ones by
    position, moved ones by the same rule, earlier in the original order), and a fixed kernel
    that reads a moved one still follows it (the moved one's dependencies all precede it).
    """
    read = {plan.resolve(u) for n in plan.nodes for u in n.inputs}

    def movable(n: Node) -> bool:
        if not n.outputs or raises([n]):  # the checks keep the graph's order (sinks_last)
            return False
        if not any(v in read for v in n.outputs):
            return sinks
        total = 0
        for v in n.outputs:
            size = plan.sizes.prod_static(v.type.shape)
            if size is None:
                return False
            total += size
        return total <= SMALL_RESULTS

    fixed: dict[Node, int] = {}
    anchor: dict[Node, int] = {}
    after: dict[int, list[Node]] = {}
    for n in plan.nodes:
        if not movable(n):
            fixed[n] = len(fixed)
            continue
        deps = [fixed[p] if p in fixed else anchor[p] for u in n.inputs
                if (p := plan.resolve(u).producer) in fixed or p in anchor]
        anchor[n] = max(deps, default=-1)
        after.setdefault(anchor[n], []).append(n)
    order = after.get(-1, [])
    for n, k in fixed.items():
        order.append(n)
        order.extend(after.get(k, []))
    plan.nodes[:] = order


def buffer_root(plan: Plan, v: Value, outs: set[Value]) -> Value:
    """The value whose buffer ``v`` lives in: through aliases and ``reshape`` views (an
    output's reshape has a buffer of its own)."""
    v = plan.resolve(v)
    while v.producer is not None and v.producer.op == "reshape" and v not in outs:
        v = plan.resolve(v.producer.inputs[0])
    return v


def plan_in_place(graph: Graph, plan: Plan, wanted: Mapping[str, str],
                  kernels: KernelTraits) -> dict[int, int]:
    """Which outputs are written into an input's buffer; reorders ``plan.nodes`` to allow it.

    A pair (output ``o``, input ``x``) is granted when both have one type, ``o`` is computed by
    a kernel ``W`` (not an input, a constant or another output's value) and

    - ``W`` reads ``x``'s buffer only as an elementwise kernel whose operand has ``o``'s shape:
      each element is loaded before the element is stored (``KernelTraits.elementwise``), so
      the load of ``x[i]`` precedes the store of ``o[i]``; or ``W`` reads all of its operands
      before it stores ``o`` (``KernelTraits.reads_all_first``: ``random_generator`` writing
      its next state over its state); no other kernel kind may overwrite what it reads;
    - every other kernel that reads ``x`` (also through a ``reshape`` alias) runs before ``W``:
      ``W`` is moved down to just after the last one, which is allowed when no kernel in
      between reads a result of ``W``.

    Other pairs are not granted: their outputs get fresh buffers as usual. Returns
    {output index: input index}.
    """
    if not wanted:
        return {}
    in_index = {v.name: i for i, v in enumerate(graph.inputs)}
    outs = [plan.resolve(v) for v in graph.outputs]
    out_set = set(outs)

    def root(v: Value) -> Value:
        return buffer_root(plan, v, out_set)

    nodes = plan.nodes

    def reads(n: Node, x: Value) -> list[Value]:
        return [u for u in n.inputs if root(u) is x]

    pairs: dict[int, int] = {}
    for j, o_val in enumerate(graph.outputs):
        name = wanted.get(o_val.name)
        if name is None or name not in in_index:
            continue
        i = in_index[name]
        x, o = graph.inputs[i], outs[j]
        w = o.producer
        # the output's own type (``o`` may be a kernel's result of another shape and the same
        # elements: ``fold_output_reshapes``)
        if (o_val.type != x.type or w is None or w.op == "constant" or w not in nodes
                or outs.count(o) != 1 or i in pairs.values()):
            continue
        if not kernels.reads_all_first(w, o) and any(
                not kernels.elementwise(w) or u.type.shape != o.type.shape
                for u in reads(w, x)):
            continue  # the writer would overwrite elements it has still to read
        pairs[j] = i
    for _ in range(len(pairs) + 1):
        writers: dict[Node, list[Value]] = {}
        for j, i in pairs.items():
            writers.setdefault(outs[j].producer, []).append(graph.inputs[i])  # type: ignore
        moved_ok = True
        for w, xs in writers.items():
            pos = nodes.index(w)
            last = max((k for k, n in enumerate(nodes) if n is not w
                        and any(reads(n, x) for x in xs)), default=-1)
            if last <= pos:
                continue
            results = set(w.outputs)
            if any(root(u) in results or u in results for n in nodes[pos + 1:last + 1]
                   for u in n.inputs):
                for j in [j for j, i in pairs.items() if outs[j].producer is w]:
                    del pairs[j]
                moved_ok = False
                break
            nodes.remove(w)
            nodes.insert(last, w)  # `last` shifted down by one: just after the last reader
        if moved_ok:
            break
    # A final check of the order: every reader of a granted input precedes its writer.
    for j, i in list(pairs.items()):
        w = outs[j].producer
        pos = nodes.index(w)  # type: ignore[arg-type]
        if any(k > pos and reads(n, graph.inputs[i]) for k, n in enumerate(nodes)):
            del pairs[j]
    return pairs


# -- buffers ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Buffer:
    """Where a value lives: ``kind`` is "input" or "output" (the graph's, by index), "temp"
    (a temporary the program owns, ``b<index>``) or "constant" (the index-th constant node)."""

    kind: str
    index: int

    @property
    def name(self) -> str:
        """``b<index>`` for a temporary (the name ``plan_arena`` orders ties by)."""
        return f"b{self.index}"


# The bytes of a buffer: an int when its shape is static, else (constant factor, symbols in
# order, element width): two symbolic sizes are equal when these are.
Bytes = int | tuple[int, tuple[str, ...], int]


@dataclass
class Memory:
    """Every value's buffer, each kernel step's role, and the temporaries' lifetimes."""

    buffers: dict[Value, Buffer] = field(default_factory=dict)
    owners: list[Value] = field(default_factory=list)  # temporary k -> the value it was made for
    sizes: list[Bytes] = field(default_factory=list)  # temporary k -> its bytes
    views: set[Node] = field(default_factory=set)  # reshapes whose result is their operand's
    first: dict[int, int] = field(default_factory=dict)  # temporary -> first step it is written
    last: dict[int, int] = field(default_factory=dict)  # temporary -> last step it is used

    def static_sizes(self) -> bool:
        """True when every temporary has a static size (then it can live in an arena)."""
        return all(isinstance(z, int) for z in self.sizes)

    def lives(self) -> dict[str, tuple[int, int, int]]:
        """``plan_arena``'s input: temporary name -> (first step, last step, bytes)."""
        return {f"b{k}": (self.first.get(k, 0), self.last.get(k, 0), int(z))  # type: ignore
                for k, z in enumerate(self.sizes)}


def buffer_bytes(sizes: Sizes, v: Value) -> Bytes:
    """The bytes of ``v``'s buffer (see ``Bytes``)."""
    width = v.type.dtype.numpy.itemsize
    const, syms = 1, []
    for d in v.type.shape:
        s = sizes.static(d)
        if s is None:
            syms.append(str(d))
        else:
            const *= s
    return const * width if not syms else (const, tuple(syms), width)


def assign_buffers(graph: Graph, plan: Plan, in_place: Mapping[int, int],
                   kernels: KernelTraits) -> Memory:
    """A buffer for every value the kernels of ``plan.nodes`` read or write (see ``Buffer``);
    step ``i`` is ``plan.nodes[i]``.

    Inputs and outputs are the graph's (an output granted in place is its input's buffer); a
    constant that is not an output is its own; a ``reshape`` whose result is not an output is a
    view of its operand's buffer; a kernel's other results get a new temporary, unless the
    kernel is elementwise and one of its operands of the result's type dies there (``take
    over``): a relu over its dying input, an accumulation of gradients hold one buffer, not two.
    """
    mem = Memory()
    buf = mem.buffers
    for i, v in enumerate(graph.inputs):
        buf[v] = Buffer("input", i)
    outs = [plan.resolve(v) for v in graph.outputs]
    for j, v in enumerate(outs):
        k = in_place.get(j)
        buf[v] = Buffer("output", j) if k is None else Buffer("input", k)
    out_set = set(outs)
    nodes = plan.nodes
    last_read: dict[Value, int] = {}  # buffer (its root value) -> last node reading it
    for i, n in enumerate(nodes):
        for u in n.inputs:
            last_read[buffer_root(plan, u, out_set)] = i
    constants = 0
    for i, n in enumerate(nodes):
        if n.op == "constant":
            if n.outputs[0] not in out_set:
                buf[n.outputs[0]] = Buffer("constant", constants)
            constants += 1
            continue
        if n.op == "reshape" and n.outputs[0] not in out_set:
            buf[n.outputs[0]] = buf[plan.resolve(n.inputs[0])]
            mem.views.add(n)
            continue
        taken: set[Buffer] = set()
        for v in n.outputs:
            if v not in buf:
                b = _take_over(plan, mem, kernels, n, i, v, out_set, last_read, taken)
                if b is None:
                    b = Buffer("temp", len(mem.owners))
                    mem.owners.append(v)
                    mem.sizes.append(buffer_bytes(plan.sizes, v))
                buf[v] = b
                taken.add(b)
    _lifetimes(plan, mem)
    return mem


def _take_over(plan: Plan, mem: Memory, kernels: KernelTraits, n: Node, i: int, v: Value,
               outs: set[Value], last_read: Mapping[Value, int],
               taken: set[Buffer]) -> Buffer | None:
    """A temporary that elementwise kernel ``n`` (step ``i``) may write its result ``v`` into:
    an operand of ``v``'s type that no later kernel reads (an output has its own buffer, never
    a temporary). Each element is loaded before the element is stored
    (``KernelTraits.elementwise``), so the load of ``x[i]`` precedes the store of ``v[i]`` (as
    for ``plan_in_place``); the kernel binds one pointer for both."""
    if not kernels.elementwise(n):
        return None
    for u in n.inputs:
        r = buffer_root(plan, u, outs)
        b = mem.buffers.get(r)
        if (b is None or b.kind != "temp" or b in taken or last_read.get(r) != i
                or u.type != v.type or mem.sizes[b.index] != buffer_bytes(plan.sizes, v)):
            continue
        if all(w.type.shape == v.type.shape for w in n.inputs
               if buffer_root(plan, w, outs) is r):
            return b
    return None


def _lifetimes(plan: Plan, mem: Memory) -> None:
    """The first step that writes each temporary and the last step that reads or writes it."""
    for i, n in enumerate(plan.nodes):
        if n.op == "constant":
            continue
        for v in n.inputs:
            b = mem.buffers[plan.resolve(v)]
            if b.kind == "temp":
                mem.last[b.index] = i
        for v in n.outputs:
            out = mem.buffers.get(v)
            if out is not None and out.kind == "temp":
                mem.first.setdefault(out.index, i)
                mem.last[out.index] = max(mem.last.get(out.index, i), i)


# -- the arena -------------------------------------------------------------------------------

ALIGN = 64  # bytes: every buffer of the arena starts on a cache line


def plan_arena(lives: Mapping[str, tuple[int, int, int]]) -> tuple[dict[str, int], int]:
    """Offsets of buffers in one arena, from their lifetimes: (first step, last step, bytes).

    Two buffers whose step ranges overlap never overlap in memory. Greedy by size (largest
    first), each at the lowest offset that is free during its whole life: near the peak of live
    bytes for the nets of a training step (the benchmark prints both). Returns (offsets, total).
    """
    order = sorted(lives, key=lambda b: (-lives[b][2], lives[b][0], b))
    # Offsets are int64 here and in the program: checked once, in exact ints, before any is
    # computed (the driver's check_addressable refuses such graphs first, naming the value).
    bound = sum(max(ALIGN, -(-z // ALIGN) * ALIGN) for _, _, z in lives.values())
    if bound > MAX_BYTES:
        raise ResourceError(f"the arena of {len(order)} intermediate values may need "
                            f"{fmt_bytes(bound)}, more than the 2**62 bytes a program can "
                            f"address (the largest value needs {fmt_bytes(lives[order[0]][2])})")
    n = len(order)
    f = np.empty(n, np.int64)
    la = np.empty(n, np.int64)
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    offsets: dict[str, int] = {}
    total = 0
    for k, b in enumerate(order):
        s, e, size = lives[b]
        size = max(ALIGN, -(-size // ALIGN) * ALIGN)
        live = (f[:k] <= e) & (la[:k] >= s)
        off = 0
        if live.any():
            idx = np.argsort(lo[:k][live], kind="stable")
            starts, ends = lo[:k][live][idx], hi[:k][live][idx]
            for a, z in zip(starts.tolist(), ends.tolist()):
                if a - off >= size:
                    break
                off = max(off, z)
        f[k], la[k], lo[k], hi[k] = s, e, off, off + size
        offsets[b] = off
        total = max(total, off + size)
    return offsets, total


# -- Kernels that may raise an input error run before the first in-place write ---------------


def raises(graph_nodes: Sequence[Node]) -> bool:
    """True when a node (or a fused body's node) may raise an input error when run."""
    for n in graph_nodes:
        if n.body is not None:
            if raises(n.body.nodes):
                return True
        elif n.op != "constant" and get_op(n.op).raises_input_error:
            return True
    return False


def barriers(nodes: Sequence[Node], resolve: Callable[[Value], Value]) -> set[Node]:
    """The kernels that may raise an input error when they run: every checking kernel but one
    whose indices an earlier kernel already checked against a size no larger (the backward's
    ``gather_grad`` of a token embedding reads the forward ``gather``'s indices: it cannot
    fail once that passed, so it need not hold the updates of the other parameters back)."""
    seen: list[tuple[Value, Dim]] = []
    out: set[Node] = set()
    for n in nodes:
        if not raises([n]):
            continue
        if n.body is not None:  # (no checking op fuses today)
            out.add(n)
            continue
        idx = resolve(n.inputs[get_op(n.op).operands.index("indices")])
        axis = n.attrs["axis"]
        size = n.inputs[0].type.shape[axis] if n.op == "gather" else \
            n.attrs["output_sizes"][axis]
        if not any(v is idx and _no_larger(d, size) for v, d in seen):
            out.add(n)
        seen.append((idx, size))
    return out


def _no_larger(a: Dim, b: Dim) -> bool:
    """``a <= b`` for certain: equal dims, or two ints."""
    return a == b or (isinstance(a, int) and isinstance(b, int) and a <= b)


def checks_first(nodes: list[Node], writers: Mapping[Node, Sequence[int]],
                 reads: Mapping[Node, set[Node]], checks: set[Node]) -> set[int]:
    """Move each in-place writer after the last kernel of ``checks`` (those that may raise an
    input error), where no kernel in between reads its results; returns the output indices
    whose in-place write cannot move (their grant is dropped: they get buffers of their own).

    ``writers``: kernel -> the outputs it writes in place; ``reads``: kernel -> the kernels
    whose results it reads."""
    dropped: set[int] = set()
    for w, outs in writers.items():
        last = max((i for i, n in enumerate(nodes) if n in checks), default=-1)
        pos = nodes.index(w)
        if pos > last:
            continue
        if any(w in reads.get(n, set()) for n in nodes[pos + 1:last + 1]):
            dropped.update(outs)
            continue
        nodes.remove(w)
        nodes.insert(last, w)  # just after the last checking kernel (which moved up by one)
    return dropped



def checks_before_writes(graph: Graph, plan: Plan, granted: dict[int, int]) -> dict[int, int]:
    """Every kernel that may raise an input error (``gather``'s range check) runs before the
    first in-place write, so that a call that raises leaves its inputs as they were
    (``checks_first``); a write that cannot move loses its grant."""
    if not granted or not raises(plan.nodes):
        return granted
    outs = [plan.resolve(v) for v in graph.outputs]
    writers: dict[Node, list[int]] = {}
    for j in granted:
        writers.setdefault(outs[j].producer, []).append(j)  # type: ignore[arg-type]
    reads = {n: {plan.resolve(u).producer for u in n.inputs} for n in plan.nodes}
    checks = barriers(plan.nodes, plan.resolve)
    dropped = checks_first(plan.nodes, writers, reads, checks)  # type: ignore[arg-type]
    return {j: i for j, i in granted.items() if j not in dropped}
