"""``gradc.training_step``: a forward graph, a loss and an optimizer as one state-transition graph.

The step graph (docs/training.md) is built in four moves:

1. **Loss graph.** The forward graph's nodes, its first output (the loss) or a loss composite
   applied to it (``"cross_entropy"``: ``softmax_cross_entropy`` with a new int64 input
   ``labels``, the classes on ``class_axis``, ``ignore_index`` left out of the mean;
   ``"mse"``: ``mean_squared_error`` with a new input ``target``), and nothing else as
   outputs.
2. **Gradients.** ``gradc.grad`` of the loss graph with respect to the trained parameters (the
   ``parameters`` entries, names or ``fnmatch`` patterns, less the ``frozen`` ones). The
   loss's cotangent is the constant 1 (the loss has one element). With ``max_grad_norm``, the
   gradients are clipped by their global L2 norm (``clip_grad_norm_``).
3. **State.** Every parameter the step updates becomes a parameter of the step graph: the
   trained parameters, each one's optimizer state (zeros, named ``<param>.<state>``), the
   parameters with a forward state update (outputs named ``<param>.next``, ``gradc.ir.state``:
   batch normalization's running statistics) and, for training-mode dropout, ``rng_state``
   (uint32 ``(6,)``: counter 0, key words from ``seed``; the importer's ``rng_state`` input and
   ``rng_state_out`` output). Frozen and unselected parameters are
   constants.
4. **Update.** The optimizer writes each trained parameter's next value from its gradient
   (``gradc.optim``; a schedule's learning rate is computed once from ``step``); the outputs
   are ``loss`` then ``<name>.next`` in the order of the step graph's parameters.

Parameter order of the step graph: the forward graph's trained parameters and state-updated
parameters in its order, then each trained parameter's optimizer state in that order, then
``rng_state``.
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from gradc.autodiff import GradNames, grad, grad_names
from gradc.errors import VerifyError
from gradc.ir import builders as B
from gradc.ir.core import Graph, Node, Parameter, Value
from gradc.ir.losses import mean_squared_error, softmax_cross_entropy
from gradc.ir.optimizers import clip_grad_norm
from gradc.ir.state import SUFFIX, state_outputs
from gradc.ir.types import DType
from gradc.ir.verify import verify
from gradc.optim import SGD, Adam, AdamW

LOSSES = ("cross_entropy", "mse")
RNG_INPUT, RNG_OUTPUT, RNG_STATE = "rng_state", "rng_state_out", "rng_state"


def rng_state_value(seed: int) -> np.ndarray:
    """The initial ``rng_state``: counter 0, key words ``seed`` (low word first)."""
    return np.array([0, 0, 0, 0, seed & 0xFFFFFFFF, seed >> 32], np.uint32)


def check_seed(seed: Any, what: str) -> int:
    """A seed is an int in [0, 2**64) (the two key words of the Philox state)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= int(seed) < 2**64:
        raise VerifyError(f"{what}: seed: expected an int in [0, 2**64), got {seed!r}")
    return int(seed)


def _entries(what: str, v: Any) -> list[str]:
    if isinstance(v, str) or not isinstance(v, Iterable):
        raise VerifyError(f"training_step: {what}: expected a list of parameter names or "
                          f"patterns, got {v!r}")
    out = list(v)
    for i, n in enumerate(out):
        if not isinstance(n, str):
            raise VerifyError(f"training_step: {what}[{i}]: expected a parameter name or "
                              f"pattern (a string), got {n!r}")
    return out


class _Plan:
    """What a step graph updates, worked out from the forward graph and the arguments.

    Each entry of ``parameters`` and ``frozen`` is a name or an ``fnmatch`` pattern, matched
    case-sensitively (``fnmatchcase``) against the candidates: the floating-point parameters
    that the forward graph does not update itself (docs/training.md). Trained: the
    candidates some ``parameters`` entry selects (all with ``"all"``), less those some
    ``frozen`` entry selects, in the graph's order."""

    def __init__(self, graph: Graph, parameters: Any, frozen: Any) -> None:
        self.updates = state_outputs(graph)  # running statistics: parameter -> its update
        stateful = {p.name for p in self.updates}
        candidates = [p for p in graph.parameters
                      if p.type.dtype.is_float and p.name not in stateful]
        if isinstance(parameters, str) and parameters == "all":
            chosen = set(candidates)
        elif isinstance(parameters, str):
            raise VerifyError(f"training_step: parameters: expected 'all' or a list of "
                              f"parameter names or patterns, got {parameters!r}")
        else:
            chosen = self._select(graph, "parameters", _entries("parameters", parameters),
                                  candidates, stateful)
        dropped = self._select(graph, "frozen", _entries("frozen", frozen), candidates,
                               stateful)
        self.trained = [p for p in candidates if p in chosen and p not in dropped]
        if not self.trained:
            raise VerifyError(f"training_step: parameters: expected at least one trained "
                              f"parameter, got none (of {len(candidates)} trainable parameters "
                              f"of {graph.name!r}, {len(dropped)} frozen)")
        trained = set(self.trained)
        # The step's own parameters in the forward graph's order (module docstring).
        self.kept = [p for p in graph.parameters if p in trained or p in self.updates]

    @staticmethod
    def _select(graph: Graph, what: str, entries: list[str], candidates: list[Parameter],
                stateful: set[str]) -> set[Parameter]:
        params = {p.name: p for p in graph.parameters}
        out: set[Parameter] = set()
        for i, entry in enumerate(entries):
            hit = {p for p in candidates if p.name == entry or fnmatchcase(p.name, entry)}
            if hit:
                out |= hit
                continue
            p = params.get(entry)
            if p is not None and not p.type.dtype.is_float:
                raise VerifyError(f"training_step: {what}[{i}]: {entry!r} is "
                                  f"{p.type.dtype}: only floating-point parameters can be "
                                  f"trained")
            if entry in stateful:
                raise VerifyError(f"training_step: {what}[{i}]: {entry!r} is updated by the "
                                  f"forward graph ({entry}{SUFFIX}), never by an optimizer")
            raise VerifyError(f"training_step: {what}[{i}]: expected a name or pattern that "
                              f"matches a trainable parameter, got {entry!r}")
        return out


def _copy_nodes(src: Graph, dst: Graph, vmap: dict[Value, Value], reserved: set[str]) -> None:
    """Append copies of ``src``'s nodes to ``dst``; names in ``reserved`` or taken get fresh
    ones."""
    for n in src.nodes:
        m = Node(n.op, [vmap[x] for x in n.inputs], n.attrs, [v.type for v in n.outputs],
                 body=n.body.copy() if n.body is not None else None, name=n.name)
        for old, v in zip(n.outputs, m.outputs):
            if old.name not in reserved and not dst.uses_name(old.name):
                v.name = old.name
            vmap[old] = v
        name_blanks(dst, m)
        dst.append(m)


def name_blanks(g: Graph, n: Node) -> None:
    """Give ``n``'s unnamed results fresh names of ``g`` that its other results do not have."""
    names = {v.name for v in n.outputs}
    for v in n.outputs:
        if not v.name:
            name = g.fresh_name()
            while name in names:
                name = g.fresh_name()
            v.name = name
            names.add(name)


class _Loss:
    """The loss arguments of a step: which loss, and cross entropy's class axis and
    ignored label."""

    def __init__(self, loss: Any, class_axis: Any, ignore_index: Any) -> None:
        if loss is not None and loss not in LOSSES:
            raise VerifyError(f"training_step: loss: expected None, 'cross_entropy' or 'mse', "
                              f"got {loss!r}")
        if isinstance(class_axis, (bool, np.bool_)) or not isinstance(class_axis,
                                                                      (int, np.integer)):
            raise VerifyError(f"training_step: class_axis: expected an int, got "
                              f"{class_axis!r}")
        if ignore_index is not None and (isinstance(ignore_index, (bool, np.bool_)) or
                                         not isinstance(ignore_index, (int, np.integer))):
            raise VerifyError(f"training_step: ignore_index: expected an int or None, got "
                              f"{ignore_index!r}")
        for field, v, default in (("class_axis", class_axis, 1),
                                  ("ignore_index", ignore_index, None)):
            if v != default and loss != "cross_entropy":
                raise VerifyError(f"training_step: {field}: only for loss='cross_entropy', "
                                  f"got {field}={v!r} with loss={loss!r}")
        self.loss: str | None = loss
        self.class_axis = int(class_axis)
        self.ignore_index = None if ignore_index is None else int(ignore_index)


def _loss_graph(graph: Graph, loss: _Loss) -> tuple[Graph, list[Value]]:
    """Step 1: the forward graph with its loss as the only output, plus the new loss input."""
    if not graph.outputs:
        raise VerifyError(f"training_step: graph {graph.name!r} has no outputs (the first "
                          "output is the loss, or what the loss is applied to)")
    first = graph.outputs[0]
    f = Graph(graph.name)
    vmap: dict[Value, Value] = {}
    for v in graph.inputs:
        vmap[v] = f.input(v.name, v.type.dtype, v.type.shape)
    for p in graph.parameters:
        vmap[p] = f.add_parameter(p.name, p.value, p.type)
    _copy_nodes(graph, f, vmap, set())
    extra: list[Value] = []
    y = vmap[first]
    with f:
        if loss.loss is None:
            if not first.type.dtype.is_float or first.type.size != 1:
                raise VerifyError(f"training_step: loss: None needs the first output of "
                                  f"{graph.name!r} to be the loss (floating point, one "
                                  f"element), got %{first.name}: {first.type} (or pass "
                                  f"loss='cross_entropy' or 'mse')")
            value = y
        elif loss.loss == "cross_entropy":
            axis = label_axis(graph, loss.class_axis)
            shape = first.type.shape[:axis] + first.type.shape[axis + 1:]
            labels = f.input(_new_input(graph, "labels"), DType.int64, shape)
            extra.append(labels)
            value = softmax_cross_entropy(y, labels, ignore_index=loss.ignore_index,
                                          class_axis=axis)
        else:
            if not first.type.dtype.is_float:
                raise VerifyError(f"training_step: loss 'mse': expected a floating-point "
                                  f"first output of {graph.name!r}, got %{first.name}: "
                                  f"{first.type}")
            target = f.input(_new_input(graph, "target"), first.type.dtype, first.type.shape)
            extra.append(target)
            value = mean_squared_error(y, target)
    f.output(value, "loss" if not f.uses_name("loss") else None)  # grad's first output
    # The forward state updates stay in the graph (grad keeps every forward node) but are no
    # outputs of the loss graph: the step graph picks them up by name.
    return f, extra


def label_axis(graph: Graph, class_axis: int) -> int:
    """The class axis of the first output for ``loss='cross_entropy'``, normalized; the
    error names ``class_axis`` (``--class-axis`` on the command line)."""
    first = graph.outputs[0]
    rank = first.type.rank
    if not first.type.dtype.is_float or rank < 2:
        raise VerifyError(f"training_step: loss 'cross_entropy': expected the first output of "
                          f"{graph.name!r} to be floating-point scores of rank >= 2 (classes "
                          f"on class_axis), got %{first.name}: {first.type}")
    if not -rank <= class_axis < rank:
        raise VerifyError(f"training_step: class_axis: expected an axis of the first output "
                          f"%{first.name}: {first.type} ({-rank}..{rank - 1}), got "
                          f"{class_axis}")
    axis = class_axis % rank
    if not isinstance(first.type.shape[axis], int):
        raise VerifyError(f"training_step: class_axis: expected an axis of static size (the "
                          f"class count), got axis {axis} of %{first.name}: {first.type}")
    return axis


def _new_input(graph: Graph, name: str) -> str:
    if graph.uses_name(name):
        raise VerifyError(f"training_step: graph {graph.name!r} already has a value named "
                          f"{name!r}, the input the loss adds (rename it)")
    return name


def training_step(graph: Graph, optimizer: Any, loss: str | None = None,
                  parameters: str | Sequence[str] = "all", frozen: Sequence[str] = (),
                  seed: int = 0, class_axis: int = 1, ignore_index: int | None = None,
                  max_grad_norm: float | None = None) -> Graph:
    """The training step of a forward graph as one graph (docs/training.md)."""
    if not isinstance(graph, Graph):
        raise VerifyError(f"training_step: graph: expected a gradc.Graph, got "
                          f"{type(graph).__name__}")
    if not isinstance(optimizer, (SGD, Adam, AdamW)):
        raise VerifyError(f"training_step: optimizer: expected gradc.optim.SGD, Adam or AdamW, "
                          f"got {type(optimizer).__name__}")
    spec = _Loss(loss, class_axis, ignore_index)
    clip = _max_grad_norm(max_grad_norm)
    seed = check_seed(seed, "training_step")
    verify(graph)
    for name in ("step", "loss"):
        if any(v.name == name for v in graph.inputs):
            raise VerifyError(f"training_step: graph {graph.name!r} has an input named "
                              f"{name!r}, a name the step graph gives its own {name} (rename "
                              f"it)")
    plan = _Plan(graph, parameters, frozen)
    rng = _rng(graph)
    f, extra = _loss_graph(graph, spec)
    wrt = [p.name for p in plan.trained]
    g = grad(f, wrt)
    return _step_graph(graph, g, grad_names(f, wrt), extra, plan, rng, optimizer, seed, clip)


def _max_grad_norm(v: Any) -> float | None:
    """None, or a finite float > 0 (zero or a negative value would zero or flip every
    gradient; PyTorch accepts any: gradc's choice)."""
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                             np.floating)) \
            or not math.isfinite(float(v)) or not float(v) > 0:
        raise VerifyError(f"training_step: max_grad_norm: expected None or a finite number "
                          f"> 0, got {v!r}")
    return float(v)


def _rng(graph: Graph) -> tuple[Value, Value] | None:
    """The importer's dropout state: input ``rng_state`` and output ``rng_state_out``."""
    ins = [v for v in graph.inputs if v.name == RNG_INPUT]
    outs = [v for v in graph.outputs if v.name == RNG_OUTPUT]
    if not ins:
        return None
    t = ins[0].type
    if t.dtype != DType.uint32 or tuple(t.shape) != (6,) or not outs or outs[0].type != t:
        raise VerifyError(f"training_step: input {RNG_INPUT!r}: expected uint32 (6,) with an "
                          f"output {RNG_OUTPUT!r} of the same type (the dropout state that "
                          f"gradc.from_onnx adds), got {t}")
    if graph.uses_name(RNG_STATE) and RNG_STATE != RNG_INPUT:
        raise VerifyError(f"training_step: {RNG_STATE!r} is taken in {graph.name!r}")
    return ins[0], outs[0]


def _step_graph(graph: Graph, g: Graph, names: GradNames, extra: list[Value], plan: _Plan,
                rng: tuple[Value, Value] | None, optimizer: Any, seed: int,
                max_grad_norm: float | None) -> Graph:
    """Steps 2-4: the gradient graph's nodes in a graph whose parameters are the state."""
    s = Graph(graph.name if graph.name.endswith("_step") else f"{graph.name}_step")
    kept = {p.name for p in plan.kept}
    state_names = [f"{p.name}.{k}" for p in plan.trained for k in optimizer.state]
    reserved = {"loss", "step"} | {f"{p.name}{SUFFIX}" for p in plan.kept}
    reserved |= {n + SUFFIX for n in state_names} | set(state_names)
    if rng is not None:
        reserved |= {RNG_STATE, RNG_STATE + SUFFIX}
    taken = {v.name for v in graph.inputs if not (rng and v.name == RNG_INPUT)} | kept
    for n in state_names + ([RNG_STATE] if rng is not None else []):
        if n in taken:
            raise VerifyError(f"training_step: graph {graph.name!r} has an input or parameter "
                              f"named {n!r}, the name of a state parameter of the step graph "
                              f"(rename it)")
    vmap: dict[Value, Value] = {}
    fwd_inputs = {v.name for v in graph.inputs} | {v.name for v in extra}
    for v in g.inputs:
        if v.name in fwd_inputs and not (rng and v.name == RNG_INPUT):
            vmap[v] = s.input(v.name, v.type.dtype, v.type.shape)
    step = s.input("step", DType.int64, (1,))
    owned: dict[str, Parameter] = {}
    for p in g.parameters:
        if p.name in kept:
            owned[p.name] = vmap[p] = s.add_parameter(p.name, _copy(p), p.type)  # type: ignore
    state: dict[str, dict[str, Parameter]] = {}
    for p in plan.trained:
        state[p.name] = {k: s.add_parameter(f"{p.name}.{k}", np.zeros_like(p.value)
                                            if p.value is not None else None, p.type)
                         for k in optimizer.state}
    rng_param = None
    if rng is not None:
        rng_param = s.add_parameter(RNG_STATE, rng_state_value(seed))
        vmap[next(v for v in g.inputs if v.name == RNG_INPUT)] = rng_param
    with s:
        for p in g.parameters:
            if p not in vmap:  # frozen or unselected: a constant of the step graph
                if p.value is None:
                    raise VerifyError(f"training_step: parameter {p.name!r} has no value (a "
                                      f"frozen parameter becomes a constant)")
                vmap[p] = B.constant(p.value)
        # grad's inputs: the loss graph's, then the loss's cotangent, seeded with 1.
        (seed_name,) = names.cotangents.values()  # the loss graph's one output
        seed_in = next(v for v in g.inputs if v.name == seed_name)
        vmap[seed_in] = B.constant(np.ones(seed_in.type.shape, seed_in.type.dtype.numpy))
        _copy_nodes(g, s, vmap, reserved)
        by_name = {v.name: v for v in g.outputs[1:]}
        grads = [vmap[by_name[names.gradients[p.name]]] for p in plan.trained]
        if max_grad_norm is not None:  # after the gradients, before the optimizer (PyTorch's)
            grads = clip_grad_norm(grads, max_grad_norm)
        lr = optimizer.learning_rate(step)  # a schedule: computed once for every parameter
        nexts: dict[str, Value] = {}
        for p, gp in zip(plan.trained, grads):
            new_p, new_state = optimizer.update(owned[p.name], gp, state[p.name], step, lr)
            nexts[p.name] = new_p
            for k, v in new_state.items():
                nexts[f"{p.name}.{k}"] = v
        g_values = {v.name: v for n in g.nodes for v in n.outputs}
        for p, upd in plan.updates.items():
            nexts[p.name] = vmap[g_values[upd.name]]
        if rng is not None:
            nexts[RNG_STATE] = vmap[g_values[rng[1].name]] if rng[1].name in g_values \
                else rng_param  # type: ignore[assignment]
    s.output(vmap[g.outputs[0]], "loss")
    for p in s.parameters:
        s.output(nexts[p.name], p.name + SUFFIX)
    verify(s)
    return s


def _copy(p: Parameter) -> np.ndarray | None:
    """A parameter's initial value, copied: the step graph never shares the forward graph's
    arrays (a Trainer updates its own)."""
    return None if p.value is None else p.value.copy()


def zero_state(step_graph: Graph) -> Mapping[str, np.ndarray]:
    """Every parameter's value in a step graph (for tests and tools)."""
    return {p.name: p.value for p in step_graph.parameters if p.value is not None}


__all__ = ["training_step", "rng_state_value", "check_seed", "name_blanks", "label_axis",
           "LOSSES"]
