"""``gradc.Trainer``: a compiled training step and the state it carries between calls.

The step graph (``gradc.training_step``) is compiled once -- on the ``"c"`` target, once per
batch size when the graph's sizes are symbolic (a batch dim): its symbols are bound from the
first batch of each size (``SizedExecutables``, at most ``MAX_SIZES`` sizes; further sizes share
one executable with the symbols free), so that the step plans its intermediate values in one
arena, allocated once, instead of allocating them on every call; a training loop compiles for
its batch size, and for its smaller last batch if the data does not divide. ``shapes=`` binds
symbols for every step instead. Its parameters are the state: the trained parameters, the
optimizer state, running statistics and ``rng_state``; the Trainer owns one array for each and
passes them to every call, whichever executable runs it, so the state is one. On the ``"c"``
target the step writes each ``<name>.next`` into the array of ``<name>`` itself (the C target's
``update_in_place``): no parameter is copied and no state array is allocated per step (an
output not granted in place is a new array, which the Trainer keeps: the next executable gets
it). On the ``"cuda"`` target the state
lives on the GPU: each ``<name>.next`` is written in place into the slot of ``<name>`` in the
device arena and returned as a ``DeviceArray`` of that slot (``keep_on_device``), which the
next step passes back without a copy; the loss is the only value read back per step, and
``parameters``, ``state_dict``, ``save`` and ``export`` copy the state to the host. On the
other targets each call returns fresh arrays, which the Trainer keeps in place of the old ones
(still no copy).
``last_step_bytes`` reports what the last step did with the state, measured from the arrays
the call returned.

``export`` writes the forward graph for inference (batch normalization in inference mode with the
running statistics, dropout as identity) as ONNX; ``save``/``load`` use ``.npz`` (NumPy's
standard zip of ``.npy`` files), written atomically.
"""

from __future__ import annotations

import io
import operator
import os
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.api import compile
from gradc.backends.onnx.target import to_onnx
from gradc.errors import GradcError, InputError, UnsupportedError
from gradc.executable import Executable, SizedExecutables
from gradc.files import check_input_file, write_bytes_atomically
from gradc.ir import builders as B
from gradc.ir.core import Graph, Node, Parameter, Value
from gradc.ir.state import SUFFIX, state_outputs
from gradc.train_data import check_batch, data_spec
from gradc.training import RNG_INPUT, RNG_OUTPUT, check_seed, name_blanks, training_step

STEP_KEY = "step"
# Targets whose programs are planned from static sizes (the C target's arena of intermediate
# values needs every shape known when it compiles): a Trainer on one of them binds a symbolic
# batch from the batches it is given. The CUDA target specializes per set of sizes in its own
# runner; the other targets plan nothing from sizes, so they compile once, with symbols free.
BINDING_TARGETS = frozenset({"c"})
MAX_SIZES = 4  # batch sizes compiled per Trainer: a run's batch and its last, smaller one


def _owned(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy that nobody else holds (the C target updates it in place)."""
    return np.array(a, copy=True, order="C")


def _host(a: Any) -> np.ndarray:
    """A NumPy copy of a state array (a ``DeviceArray`` of the CUDA target is copied back)."""
    return np.array(a, copy=True)


class Trainer:
    """Compiles a training step once and keeps its state between calls (docs/training.md)."""

    def __init__(self, graph: Graph, optimizer: Any, loss: str | None = None,
                 parameters: str | Sequence[str] = "all", frozen: Sequence[str] = (),
                 target: str = "c", seed: int = 0, class_axis: int = 1,
                 ignore_index: int | None = None, max_grad_norm: float | None = None,
                 **options: Any) -> None:
        check_seed(seed, "Trainer")
        self.graph = graph
        self.optimizer = optimizer
        self.step_graph = training_step(graph, optimizer, loss, parameters, frozen, seed,
                                        class_axis, ignore_index, max_grad_norm)
        # What a batch must hold: checked before every step as `gradc train` checks its file.
        self.batch_spec = data_spec(graph, self.step_graph, class_axis, ignore_index)
        self.target = target
        if target in ("c", "cuda"):
            options.setdefault("update_in_place", {p.name + SUFFIX: p.name
                                                   for p in self.step_graph.parameters})
        if target == "cuda":  # the state stays in the device arena between steps; the loss
            # is read after the step's bookkeeping, which so runs while the GPU works
            options.setdefault("keep_on_device", [p.name + SUFFIX
                                                  for p in self.step_graph.parameters]
                               + ["loss"])
        for p in self.step_graph.parameters:
            if p.value is None:
                raise InputError(f"Trainer: parameter {p.name!r} has no value (a graph parsed "
                                 f"from text needs parse(text, parameters=...))")
        shapes = options.pop("shapes", None)
        self._compiled = SizedExecutables(
            self.step_graph, lambda sizes: compile(self.step_graph, target, shapes=sizes,
                                                   **options),
            shapes, MAX_SIZES if target in BINDING_TARGETS else 0)
        self._state: dict[str, np.ndarray] = {p.name: _owned(p.value)  # type: ignore[arg-type]
                                              for p in self.step_graph.parameters}
        # (the outputs of the state in its order, their bytes): the state after the last step
        # (``step`` takes outputs that are these very arrays without a look at each)
        self._resident: tuple[list[str], int] | None = None
        self._steps = 0
        self._batch_names = [v.name for v in self.step_graph.inputs if v.name != STEP_KEY]
        forward = {q.name for q in graph.parameters}
        # The model's own values: trained parameters and running statistics.
        self._model_names = [p.name for p in self.step_graph.parameters if p.name in forward]
        # What the last step did with the state (bytes): updated in place, newly allocated,
        # copied by the Trainer (never: it keeps the arrays a call returns).
        self.last_step_bytes = {"in_place": 0, "allocated": 0, "copied": 0}

    # -- training ---------------------------------------------------------------------------
    @property
    def executable(self) -> Executable:
        """The compiled step that ran last (before any step: the one compiled with the Trainer,
        where the sizes did not wait for a batch)."""
        if self._compiled.last is None:
            raise GradcError(f"Trainer.executable: no step compiled yet: the sizes of graph "
                             f"{self.step_graph.name!r} are symbolic "
                             f"({', '.join(self._compiled.free)}), so the step is compiled for "
                             f"those of each batch (executable_for(**batch) compiles one now)")
        return self._compiled.last

    @property
    def executables(self) -> dict[tuple[tuple[str, int], ...], Executable]:
        """The compiled steps by the sizes they bind: ``(("batch", 32),)``, ...; ``()`` for the
        one compiled with the symbols free (or without any)."""
        return dict(self._compiled.executables)

    def executable_for(self, /, **batch: Any) -> Executable:
        """The compiled step for the sizes of ``batch`` (arrays as ``step`` takes them; only
        their shapes are read), compiled now unless it was before: ``gradc train`` compiles
        its batch sizes before the first step."""
        self._check_names("Trainer.executable_for", batch)
        return self._compiled.select({**batch, STEP_KEY: np.ones(1, np.int64)})

    def _check_names(self, where: str, batch: Mapping[str, Any]) -> None:
        for name in batch:
            if name not in self._batch_names:
                raise InputError(f"{where}: unexpected array {name!r}: the step takes "
                                 f"{', '.join(self._batch_names)}")
        for name in self._batch_names:
            if name not in batch:
                raise InputError(f"{where}: missing array {name!r}: the step takes "
                                 f"{', '.join(self._batch_names)}")

    @property
    def batch_names(self) -> list[str]:
        """The arrays ``step`` takes: the forward inputs, then ``labels`` or ``target``."""
        return list(self._batch_names)

    @property
    def steps(self) -> int:
        """The number of updates made so far (the next step's counter is this plus 1)."""
        return self._steps

    def step(self, /, **batch: Any) -> float:
        """One update on one batch; returns the loss (a NaN or infinite loss is returned as it
        is, after the update: the caller decides whether to stop). The batch is checked first
        as ``gradc train`` checks its data (``train_data.check_batch``: labels in the class
        range or ``ignore_index``, no NaN or infinity): an InputError changes no state."""
        self._check_names("Trainer.step", batch)
        # A strided view (a column slice, a transposed batch) is fine here: the C target needs
        # C-contiguous arrays, so such a batch is copied once (contiguous ones are not).
        batch = {k: np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v
                 for k, v in batch.items()}
        check_batch("Trainer.step", batch, self.batch_spec)  # before the step: state untouched
        t = self._steps + 1
        batch[STEP_KEY] = np.array([t], np.int64)
        # The sizes are checked before a step of a new size is compiled; every executable
        # reads and updates the Trainer's one state.
        out = self._compiled.select(batch)(**batch, **self._state)
        if self._resident is not None and all(map(operator.is_, map(
                out.__getitem__, self._resident[0]), self._state.values())):
            # every output is the array passed for its state (in place, as on the last step)
            self.last_step_bytes = {"in_place": self._resident[1], "allocated": 0, "copied": 0}
        else:
            in_place = allocated = 0
            for name, old in self._state.items():
                new = out[name + SUFFIX]
                if new is old:
                    in_place += new.nbytes
                else:
                    allocated += new.nbytes
                    self._state[name] = new
            self.last_step_bytes = {"in_place": in_place, "allocated": allocated, "copied": 0}
            self._resident = ([n + SUFFIX for n in self._state], in_place + allocated)
        self._steps = t
        return float(np.asarray(out["loss"], np.float64).reshape(-1)[0])

    # -- state ------------------------------------------------------------------------------
    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """Name -> a copy of the current array, for the trained parameters and the running
        statistics (copies: the C target updates the Trainer's own arrays in place; the CUDA
        target's live on the GPU)."""
        return {n: _host(self._state[n]) for n in self._model_names}

    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameters, optimizer state, ``rng_state`` and ``step``, as copies."""
        out = {n: _host(a) for n, a in self._state.items()}
        out[STEP_KEY] = np.array(self._steps, np.int64)
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the whole state (checked first: nothing changes when a check fails)."""
        if not isinstance(state, Mapping):
            raise InputError(f"load_state_dict: expected a mapping of names to arrays, got "
                             f"{type(state).__name__}")
        want = list(self._state) + [STEP_KEY]
        extra = sorted(set(state) - set(want))
        if extra:
            raise InputError(f"load_state_dict: unexpected entry {extra[0]!r} (this step's state "
                             f"is {', '.join(want)})")
        new: dict[str, np.ndarray] = {}
        for p in self.step_graph.parameters:
            if p.name not in state:
                raise InputError(f"load_state_dict: missing entry {p.name!r}")
            a = np.asarray(state[p.name])
            if a.dtype != p.type.dtype.numpy or a.shape != tuple(p.type.shape):
                raise InputError(f"load_state_dict: {p.name!r}: expected "
                                 f"{p.type.dtype.numpy} of shape {tuple(p.type.shape)}, got "
                                 f"{a.dtype} of shape {a.shape}")
            new[p.name] = _owned(a)
        if STEP_KEY not in state:
            raise InputError(f"load_state_dict: missing entry {STEP_KEY!r}")
        s = np.asarray(state[STEP_KEY])
        if s.size != 1 or s.dtype.kind not in "iu" or int(s.reshape(-1)[0]) < 0:
            raise InputError(f"load_state_dict: {STEP_KEY!r}: expected a non-negative integer, "
                             f"got {s!r}")
        self._state = new
        self._steps = int(s.reshape(-1)[0])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` as ``.npz`` (atomically: an interrupted save leaves the old
        file, never a partial one)."""
        buf = io.BytesIO()
        savez: Any = np.savez  # (its stubs read a keyword array named allow_pickle as a flag)
        savez(buf, **self.state_dict())
        write_bytes_atomically(path, buf.getvalue())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Read a file that ``save`` wrote and ``load_state_dict`` it."""
        check_input_file(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                state = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise InputError(f"{os.fspath(path)}: expected a .npz file written by "
                             f"Trainer.save, got one that does not read ({e})") from None
        self.load_state_dict(state)

    # -- export -----------------------------------------------------------------------------
    def inference_graph(self) -> Graph:
        """The forward graph for inference with the current values (see ``export``)."""
        return inference_graph(self.graph, self.parameters)

    def export(self, path: str | os.PathLike[str]) -> None:
        """The trained model for inference as ONNX (atomically written).

        The weights are initializers only, not also graph inputs as ``gradc.to_onnx`` lists
        parameters: a deployed model's weights are constants (onnxruntime then folds them, and
        does not warn about initializers that a caller could override). The exporter drops them
        from the inputs before it seals the model with its digest, so ``from_onnx`` reads the
        file back through the embedded graph."""
        model = to_onnx(self.inference_graph(), weights_as_inputs=False)
        write_bytes_atomically(path, model.SerializeToString())

    # -- PyTorch (gradc.from_torch) ---------------------------------------------------------
    def to_torch(self, module: Any) -> Any:
        """Copy the trained parameters and state (running statistics, ``num_batches_tracked``)
        into a ``torch.nn.Module`` by ``state_dict`` name, in place; returns the module.

        Every name is checked (present in the module, same dtype and shape) before anything is
        copied. A tied weight is one parameter here and one tensor in the module: copied once.
        """
        from gradc.torch_frontend import import_torch  # lazy: torch is an optional extra
        torch = import_torch()
        if not isinstance(module, torch.nn.Module):
            raise InputError(f"Trainer.to_torch: module: expected a torch.nn.Module, got "
                             f"{type(module).__name__}")
        targets = dict(module.state_dict(keep_vars=True))
        targets.update(module.named_buffers())  # non-persistent buffers the forward updates
        missing = [n for n in self._model_names if n not in targets]
        if missing:
            raise InputError(f"Trainer.to_torch: the module has no parameter or buffer named "
                             f"{missing[0]!r} (a graph from gradc.from_torch of this module's "
                             f"class names its parameters by state_dict)")
        for name in self._model_names:
            t, a = targets[name], self._state[name]
            if tuple(t.shape) != a.shape or str(t.dtype) != f"torch.{a.dtype}":
                raise InputError(f"Trainer.to_torch: {name!r}: the module's tensor is "
                                 f"{str(t.dtype).replace('torch.', '')} {tuple(t.shape)}, the "
                                 f"trained one {a.dtype} {a.shape}")
        with torch.no_grad():
            for name in self._model_names:
                targets[name].copy_(torch.from_numpy(self._state[name].copy()))
        return module

    def __repr__(self) -> str:
        return (f"<Trainer {self.graph.name} target={self.target} "
                f"optimizer={type(self.optimizer).__name__} steps={self._steps}>")


# -- the inference graph ---------------------------------------------------------------------

def _running_statistics(graph: Graph) -> dict[Node, tuple[Parameter, Parameter]]:
    """Each ``batch_normalization_training`` node and its running mean and variance: the
    parameters whose state update (``<p>.next``) reads the node's batch mean (result 1) or
    variance (result 2)."""
    found: dict[Node, dict[int, Parameter]] = {}
    for p, upd in state_outputs(graph).items():
        stack, seen = [upd], set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            n = v.producer
            if n is None:
                continue
            if n.op == "batch_normalization_training":
                k = n.outputs.index(v)
                if k in (1, 2):
                    found.setdefault(n, {})[k] = p
                continue
            stack.extend(n.inputs)
    return {n: (d[1], d[2]) for n, d in found.items() if 1 in d and 2 in d}


def _dropout_input(n: Node) -> Value | None:
    """``x`` when ``n`` is the ``mul(x, where(greater_equal(bits, T), scale, 0))`` of a
    dropout (``gradc.ir.dropout``) whose bits come from ``random_generator``."""
    if n.op != "mul" or len(n.inputs) != 2:
        return None
    w = n.inputs[1].producer
    if w is None or w.op != "where":
        return None
    ge = w.inputs[0].producer
    if ge is None or ge.op != "greater_equal":
        return None
    bits = ge.inputs[0].producer
    if bits is not None and bits.op == "reshape":
        bits = bits.inputs[0].producer
    return n.inputs[0] if bits is not None and bits.op == "random_generator" else None


def inference_graph(graph: Graph, values: Mapping[str, np.ndarray]) -> Graph:
    """``graph`` for inference: parameters from ``values`` (others keep theirs), training-mode
    batch normalization in inference mode with its running statistics, dropout as identity,
    without state outputs and the dropout state."""
    stats = _running_statistics(graph)
    state = set(state_outputs(graph).values())
    e = Graph(graph.name)
    vmap: dict[Value, Value] = {}
    placeholders: set[Node] = set()
    for v in graph.inputs:
        if v.name == RNG_INPUT:
            with e:
                vmap[v] = B.constant(np.zeros(v.type.shape, v.type.dtype.numpy))
            placeholders.add(vmap[v].producer)  # type: ignore[arg-type]
        else:
            vmap[v] = e.input(v.name, v.type.dtype, v.type.shape)
    for p in graph.parameters:
        val = values.get(p.name, p.value)
        vmap[p] = e.add_parameter(p.name, None if val is None else np.array(val), p.type)
    with e:
        for n in graph.nodes:
            x = _dropout_input(n)
            if x is not None:
                vmap[n.outputs[0]] = vmap[x]
                continue
            if n in stats:
                mean, var = stats[n]
                xin, scale, bias = (vmap[u] for u in n.inputs)
                shape = scale.type.shape
                y = B.batch_normalization(xin, B.reshape(vmap[mean], shape),
                                          B.reshape(vmap[var], shape), scale, bias,
                                          epsilon=n.attrs["epsilon"])
                vmap[n.outputs[0]] = y
                for k in (1, 2):
                    c = B.constant(np.zeros(n.outputs[k].type.shape,
                                            n.outputs[k].type.dtype.numpy))
                    placeholders.add(c.producer)  # type: ignore[arg-type]
                    vmap[n.outputs[k]] = c
                continue
            m = Node(n.op, [vmap[u] for u in n.inputs], n.attrs, [v.type for v in n.outputs],
                     body=n.body.copy() if n.body is not None else None, name=n.name)
            for old, v in zip(n.outputs, m.outputs):
                v.name = old.name if not e.uses_name(old.name) else ""
                vmap[old] = v
            name_blanks(e, m)
            e.append(m)
    for v in graph.outputs:
        if v in state or v.name == RNG_OUTPUT:
            continue
        e.output(vmap[v], v.name)
    live = _live(e)
    for n in placeholders:
        if n in live:
            raise UnsupportedError(f"export: graph {graph.name!r} uses a batch statistic or the "
                                   f"dropout state beyond batch normalization and dropout: it "
                                   f"has no inference form")
    for n in e.nodes:
        if n.op in ("batch_normalization_training", "random_generator") and n in live:
            raise UnsupportedError(f"export: graph {graph.name!r}: a {n.op} node without "
                                   f"running statistics or dropout pattern has no inference "
                                   f"form")
    e.retain(n for n in e.nodes if n in live)
    return e


def _live(g: Graph) -> set[Node]:
    live_values = set(g.outputs)
    live: set[Node] = set()
    for n in reversed(g.nodes):
        if any(v in live_values for v in n.outputs):
            live.add(n)
            live_values.update(n.inputs)
    return live


__all__ = ["Trainer", "inference_graph"]
