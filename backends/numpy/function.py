"""The body of a generated NumPy function: steps, storage and liveness, local names.

A graph (fused bodies inlined, since a body runs node by node) becomes a list of steps. Every
value lives in a *storage* (one allocation, shared by its views). A step may write its result
into an operand's buffer when that operand is a whole, writable array of the result's type
whose storage no later step and no graph output reads; so a fused elementwise group becomes one
allocation followed by ``out=`` / ``np.copyto(..., where=...)`` updates, and an anchored group's
epilogue runs in place on the anchor's result. Arguments and constants are never written.

Locals are placeholders while the statements are emitted; at the end each buffer is named after
the most telling value it held (a graph output, else a named value, else ``t<number>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from gradc.errors import GradcError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.types import Dim

from gradc.backends.numpy.text import Namer, show, string

INF = 1 << 62
_PLACEHOLDER = re.compile("\x00([0-9]+)\x00")  # never in escaped text: ascii() escapes NUL


@dataclass
class Slot:
    """Where a value lives in the generated function."""

    var: str  # a local (placeholder) or a module-level constant
    storage: int  # the allocation it belongs to (views share it)
    writable: bool  # may serve as an out= buffer once its storage is dead
    readonly: bool = False  # a broadcast view: copied before it is returned


@dataclass
class Step:
    """One node to emit, with its operands resolved through fused-body boundaries."""

    node: Node
    ins: list[Value]
    notes: list[str] = field(default_factory=list)


class Flattener:
    """Inlines fused bodies: steps, value aliases and the outer names of body results."""

    def __init__(self) -> None:
        self.alias: dict[Value, Value] = {}
        self.outer_name: dict[Value, str] = {}
        self.steps: list[Step] = []

    def res(self, v: Value) -> Value:
        """The value that actually holds ``v`` (a body input is its node's operand)."""
        return self.alias.get(v, v)

    def run(self, graph: Graph) -> None:
        """Append the steps of ``graph``."""
        notes: list[str] = []
        for n in graph.nodes:
            if n.body is None:
                self.steps.append(Step(n, [self.res(v) for v in n.inputs], notes))
                notes = []
                continue
            for b, a in zip(n.body.inputs, n.inputs):
                self.alias[b] = self.res(a)
            outs = ", ".join("%" + show(v.name) for v in n.outputs)
            notes.append(f"fused group (kind {show(n.attrs.get('kind', 'group'))}, "
                         f"{len(n.body.nodes)} nodes) -> {outs}")
            before = len(self.steps)
            self.run(n.body)
            if len(self.steps) > before:
                self.steps[before].notes[:0] = notes
                notes = []
            for o, b in zip(n.outputs, n.body.outputs):
                self.alias[o] = self.res(b)
                self.outer_name[self.res(b)] = o.name


class FunctionEmitter:
    """Emits the statements of one graph function."""

    def __init__(self, module: Any) -> None:
        self.module = module  # module-level constants and helpers (target.ModuleBuilder)
        self.namer = Namer()
        self.lines: list[str] = []
        self.slots: dict[Value, Slot] = {}
        self.members: dict[int, list[Value]] = {}
        self.foreign: set[int] = set()
        self.last_use: dict[Value, int] = {}
        self.symbols: dict[str, str] = {}
        self.held: list[list[Value]] = []  # per placeholder: the values stored in it
        self.step = 0

    # -- storage ----------------------------------------------------------------------------
    def define(self, v: Value, slot: Slot) -> None:
        """Record where ``v`` lives."""
        self.slots[v] = slot
        self.members.setdefault(slot.storage, []).append(v)
        m = _PLACEHOLDER.fullmatch(slot.var)
        if m:
            self.held[int(m.group(1))].append(v)

    def new_storage(self, foreign: bool = False) -> int:
        """A fresh storage id."""
        sid = len(self.members)
        self.members[sid] = []
        if foreign:
            self.foreign.add(sid)
        return sid

    def local(self) -> str:
        """A new local, named when the function is finished."""
        self.held.append([])
        return f"\x00{len(self.held) - 1}\x00"

    def fresh_array(self, v: Value) -> str:
        """Define ``v`` as a new array in a new local; returns the local."""
        var = self.local()
        self.define(v, Slot(var, self.new_storage(), writable=True))
        return var

    def view(self, v: Value, of: Value, writable: bool = True, readonly: bool = False) -> str:
        """Define ``v`` as a view of (or another name for) ``of``'s storage."""
        base = self.slots[of]
        var = self.local()
        self.define(v, Slot(var, base.storage, writable and base.writable,
                            readonly or base.readonly))
        return var

    def dead_after_step(self, storage: int) -> bool:
        """True if no later step and no output reads any value of this storage."""
        if storage in self.foreign:
            return False
        return all(self.last_use.get(m, -1) <= self.step for m in self.members[storage])

    def reusable(self, step: Step, positions: Sequence[int]) -> int | None:
        """The first operand position whose buffer the result may overwrite, if any."""
        result = step.node.outputs[0]
        for p in positions:
            v = step.ins[p]
            s = self.slots[v]
            if s.writable and not s.readonly and v.type == result.type \
                    and self.dead_after_step(s.storage):
                return p
        return None

    def in_place(self, step: Step, p: int) -> str:
        """Define the result as written into operand ``p``'s buffer; returns that buffer."""
        s = self.slots[step.ins[p]]
        self.define(step.node.outputs[0], Slot(s.var, s.storage, True))
        return s.var

    # -- text -------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        """Append one statement."""
        self.lines.append(line)

    def var(self, v: Value) -> str:
        """The local holding ``v``."""
        return self.slots[v].var

    def dim(self, d: Dim) -> str:
        """A dim as code: an int, or the local bound to the symbol."""
        if isinstance(d, str):
            if d not in self.symbols:
                raise GradcError(f"internal error: numpy target: symbol {d!r} is not bound "
                                 "by any graph input")
            return self.symbols[d]
        return str(d)

    def shape(self, dims: Sequence[Dim]) -> str:
        """A shape tuple as code."""
        items = [self.dim(d) for d in dims]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _pick_name(values: list[Value], outputs: dict[Value, str], outer: dict[Value, str]) -> str:
    """A buffer's name: its last graph output, else its last named value, else its first."""
    names = [outputs.get(v, outer.get(v, v.name)) for v in values]
    returned = [outputs[v] for v in values if v in outputs]
    named = [n for n in names if not n[:1].isdigit()]
    return (returned or named or names)[-1 if returned or named else 0]


def emit_function(graph: Graph, module: Any, emitters: dict) -> tuple[list[str], list[str]]:
    """(parameter names, body lines) of the graph function."""
    em = FunctionEmitter(module)
    params = [em.namer(v.name) for v in graph.inputs]
    head = []
    for v, p in zip(graph.inputs, params):
        em.define(v, Slot(p, em.new_storage(foreign=True), writable=False))
        for axis, d in enumerate(v.type.shape):
            if isinstance(d, str) and d not in em.symbols:
                em.symbols[d] = em.namer(d)
                head.append(f"{em.symbols[d]} = {p}.shape[{axis}]  # symbol {show(d)}")
    flat = Flattener()
    flat.run(graph)
    outputs = [flat.res(v) for v in graph.outputs]
    for i, s in enumerate(flat.steps):
        for v in s.ins:
            em.last_use[v] = i
    for v in outputs:
        em.last_use[v] = INF
    for i, s in enumerate(flat.steps):
        em.step = i
        em.lines.extend(f"# {note}" for note in s.notes)
        at = len(em.lines)
        emitters[s.node.op](em, s)
        em.lines.insert(at, "# " + _describe(em, s))
    returned = {v: o.name for o, v in reversed(list(zip(graph.outputs, outputs)))}
    names = [em.namer(_pick_name(vals, returned, flat.outer_name)) for vals in em.held]
    if all(line.startswith("#") for line in em.lines):
        em.emit("pass")
    body = ["with np.errstate(all='ignore'):"] + ["    " + line for line in em.lines]
    text = head + body + _returns(em, graph, outputs)
    return params, [_PLACEHOLDER.sub(lambda m: names[int(m.group(1))], t) for t in text]


def _describe(em: FunctionEmitter, s: Step) -> str:
    """The comment above a node's code: its op, its operands and where its results went."""
    outs = []
    for v in s.node.outputs:
        var = em.var(v)
        shared = [u for u in s.ins if em.slots[u].var == var]
        outs.append(var + (" (in place)" if shared else ""))
    return f"{s.node.op}({', '.join(em.var(v) for v in s.ins)}) -> {', '.join(outs)}"


def _returns(em: FunctionEmitter, graph: Graph, outputs: list[Value]) -> list[str]:
    """The return statement; outputs that alias an argument, a constant or another output,
    and broadcast views, are copied."""
    seen: set[int] = set()
    items = []
    for o, v in zip(graph.outputs, outputs):
        s = em.slots[v]
        copy = s.storage in em.foreign or s.readonly or s.storage in seen
        seen.add(s.storage)
        items.append(f"    {string(o.name)}: {s.var}{'.copy()' if copy else ''},")
    return ["return {"] + items + ["}"]
