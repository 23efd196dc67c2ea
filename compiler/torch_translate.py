"""The translation of an exported program's core-ATen graph into a gradc graph (``from_torch``).

``TorchTranslator`` walks the fx graph of a decomposed ``torch.export`` program once, in its
order, and asks the table of ``gradc.torch_ops`` for each node. Decisions:

- **Inputs** are the program's user inputs, named as ``torch.export`` names them: after the
  forward's parameters (``x``; ``xs_0``, ``xs_1`` for a list). A size that ``dynamic_shapes``
  made symbolic is a gradc symbol named after its ``torch.export.Dim`` (else torch's own name,
  ``s0``); a size computed from symbols (``2*batch``) is unsupported (gradc keeps symbols whole).
- **Parameters** are the module's parameters and the buffers the forward updates, named by their
  ``state_dict`` names and made on first use. A tied weight (one tensor under two names) is one
  parameter, under its first name in ``state_dict`` order (``named_parameters``' name).
- **State.** A buffer the forward updates (``BUFFER_MUTATION``: batch normalization's
  ``running_mean``, ``running_var`` and ``num_batches_tracked``) is a parameter whose update is
  the graph output ``<name>.next`` (``gradc.ir.state``), so ``gradc.training_step`` carries it.
  **Choice:** the other buffers are constants (causal masks, position ids, non-persistent
  buffers, and an ``eval()`` module's running statistics), and so are parameters with
  ``requires_grad=False`` (a frozen backbone), so that ``parameters="all"`` trains exactly what
  ``torch.optim`` updates given ``module.parameters()``.
- **Constants.** A node whose tensor inputs are all constants (lifted tensors, buffers that are
  no state, earlier folded nodes) and whose sizes are static is evaluated at import by torch
  itself (``FOLD_LIMIT`` elements at most, never a random op): masks built with ``arange``,
  ``full``, ``tril`` and friends become one constant, computed exactly as PyTorch computes them.
- **Outputs**: the forward's outputs, ``output`` for one tensor, ``output_0``, ... for a tuple or
  list, the key for a dict (nested: joined with ``.``); then ``<name>.next`` per updated buffer;
  then ``rng_state_out`` after a training-mode dropout (whose first use adds the input
  ``rng_state``, as ``from_onnx`` does, SPEC-training.md §21).
- **Errors.** Every node that cannot be translated (an operator outside the table, one waiting
  for a gradc operator, arguments gradc does not take) is collected; they are raised together
  as one ``UnsupportedError`` whose first line groups them by ATen operator, with the module
  path (``nn_module_stack``) and the source line (``stack_trace``) of the first of each (a
  ``VerifyError`` when every problem is an argument that a gradc operator rejects).

What converters ask (values, sizes, dtypes) is ``TorchValues``, in ``torch_values.py``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any, Iterator, Sequence

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir.core import Graph
from gradc.ir.state import SUFFIX
from gradc.torch_ops import ATEN, PENDING, SKIPPED, TorchNode, aten_name
from gradc.torch_values import RNG_INPUT, RNG_OUTPUT, TorchValues
# Importing a converter module registers its converters.
from gradc import torch_math, torch_movement, torch_nn, torch_pool, torch_transformer  # noqa: F401

FOLD_LIMIT = 1 << 20  # elements of a tensor evaluated at import


class TorchTranslator(TorchValues):
    """One translation: the decomposed exported program in, the gradc graph out."""

    def __init__(self, torch: Any, program: Any, name: str, symbols: dict[str, str]) -> None:
        super().__init__(torch, name, symbols)
        self.program = program
        self.sig = program.graph_signature
        self.failed: set[Any] = set()
        self.problems: list[tuple[str, str, str]] = []  # (ATen name, where, message)
        self.verify_only = True  # every problem a VerifyError: raise that, not Unsupported
        self.coverage: Counter[tuple[str, str]] = Counter()  # (ATen name, how) -> nodes
        self.temps = 0
        self.output_names: list[str] | None = None
        self.torch_dir = os.path.dirname(getattr(torch, "__file__", "") or "") + os.sep

    # -- the steps ------------------------------------------------------------------------
    def run(self, raise_problems: bool = True) -> Graph:
        """Translate the whole program (see the module docstring)."""
        nodes = list(self.program.graph.nodes)
        with self.graph:
            self._placeholders(nodes)
            for node in nodes:
                if node.op == "call_function":
                    self._node(node)
            for node in nodes:
                if node.op == "output":
                    self._outputs(node)
        if self.problems and raise_problems:
            self._raise_problems()
        return self.graph

    def _placeholders(self, nodes: list[Any]) -> None:
        by_name = {n.name: n for n in nodes if n.op == "placeholder"}
        canon = self._canonical_names()
        mutated = set(self.sig.buffers_to_mutate.values())
        outputs = self._output_names()
        self.reserved = set(outputs) | {f"{canon.get(t, t)}{SUFFIX}" for t in mutated}
        self.reserved |= {RNG_INPUT, RNG_OUTPUT} | set(canon.values())
        for name in sorted(set(outputs) & (set(canon.values()) | {RNG_INPUT, RNG_OUTPUT})):
            self._problem("(outputs)", "(outputs)", f"output {name!r}: the name of a parameter "
                          "or of the dropout state (rename the output's key)")
        for spec in self.sig.input_specs:
            kind = spec.kind.name
            node = by_name.get(getattr(spec.arg, "name", None))
            if node is None:
                self._problem("(inputs)", "(inputs)", f"input {spec.arg} of kind {kind} is not "
                              "supported")
                continue
            if kind == "USER_INPUT":
                self._user_input(node)
            elif kind == "PARAMETER":
                t = self.program.state_dict[spec.target]
                if getattr(t, "requires_grad", True):
                    self.tensors[node] = (canon[spec.target], t)
                else:  # frozen in PyTorch: torch.optim would not update it either
                    self.consts[node] = t
            elif kind == "BUFFER":
                persistent = spec.persistent is not False
                t = (self.program.state_dict if persistent
                     else self.program.constants)[spec.target]
                if spec.target in mutated:
                    self.tensors[node] = (canon.get(spec.target, spec.target), t)
                else:
                    self.consts[node] = t
            elif kind == "CONSTANT_TENSOR":
                self.consts[node] = self.program.constants[spec.target]
            else:
                self._problem("(inputs)", "(inputs)", f"input {node.name!r}: inputs of kind "
                              f"{kind} are not supported")
                self.failed.add(node)

    def _canonical_names(self) -> dict[str, str]:
        """Each ``state_dict`` name -> the first name of the same tensor (tied weights)."""
        first: dict[tuple, str] = {}
        out: dict[str, str] = {}
        for name, t in self.program.state_dict.items():
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
                   tuple(t.stride()), str(t.dtype)) if t.numel() else (name,)
            out[name] = first.setdefault(key, name)
        return out

    def _user_input(self, node: Any) -> None:
        val = node.meta.get("val")
        if not hasattr(val, "dtype"):
            self.scalars[node] = val  # a number the exporter specialized
            return
        try:
            dtype = self._dtype(val.dtype)
            shape = tuple(self.size(s, f"input {node.name!r}") for s in val.shape)
            if any(d == 0 for d in shape):
                raise UnsupportedError(f"shape {shape} has a 0 (gradc has no empty tensors)")
            if node.name in self.reserved:
                raise UnsupportedError("its name is also the name of an output or a parameter "
                                       "(rename the forward's argument)")
        except UnsupportedError as e:
            self._problem("(inputs)", "(inputs)", f"input {node.name!r}: {e}")
            self.failed.add(node)
            return
        v = self.graph.input(node.name, dtype, shape)
        self.env[node] = v
        self.shape_sources.setdefault(shape, v)

    def _node(self, node: Any) -> None:
        op = aten_name(node.target)
        if op in SKIPPED:
            self.scalars[node] = node.meta.get("val")
            self.coverage[(op, "skipped")] += 1
            return
        if op == "operator.getitem":
            self._getitem(node)
            return
        inputs = node.all_input_nodes
        val = node.meta.get("val")
        if not _is_tensors(val):
            self.scalars[node] = val  # arithmetic of sizes: read from the metadata where used
            return
        blocked = any(x in self.failed for x in inputs)
        if not blocked and self._fold(node, inputs, val):
            self.coverage[(op, "folded")] += 1
            return
        n = TorchNode(node, self._where(node))
        if op in PENDING:  # reported also after a refused input: every missing op is news
            self._refuse(n, f"needs gradc's {PENDING[op]} operator, which gradc does not have "
                            "yet")
            return
        if op not in ATEN:
            self._refuse(n, "is not supported (no converter for this ATen operator)")
            return
        if blocked:
            self.failed.add(node)
            return
        start = len(self.graph.nodes)
        try:
            out = ATEN[op].build(n, self)
        except UnsupportedError as e:
            self.verify_only = False
            self._refuse(n, str(e), start)
            return
        except VerifyError as e:
            self._refuse(n, str(e), start)
            return
        self.coverage[(op, "mapped")] += 1
        self._bind(node, out, start)

    def _refuse(self, n: TorchNode, msg: str, start: int | None = None) -> None:
        if start is None:
            self.verify_only = False
        self.problems.append((n.aten, n.where, f"{n.aten} ({n.where}): {msg}"))
        self.coverage[(n.op, "refused")] += 1
        self.failed.add(n.fx)
        if start is not None:
            self._name_temps(n.name, start, ())

    def _problem(self, op: str, where: str, msg: str) -> None:
        self.verify_only = False
        self.problems.append((op, where, msg))

    def _getitem(self, node: Any) -> None:
        src, k = node.args
        if src in self.failed:
            self.failed.add(node)
        elif src in self.consts:
            self.consts[node] = self.consts[src][k]
        elif src in self.scalars:
            self.scalars[node] = node.meta.get("val")
        else:
            out = self.env.get(src)
            v = out[k] if isinstance(out, tuple) and k < len(out) else None
            if v is None:
                n = TorchNode(src, self._where(src))
                self._refuse(n, f"result {k} is not supported")
                self.failed.add(node)
                return
            self.env[node] = v

    # -- folding ----------------------------------------------------------------------------
    def _fold(self, node: Any, inputs: Sequence[Any], val: Any) -> bool:
        """Evaluate the node with torch when all it reads is known (module docstring)."""
        torch = self.torch
        if any(x not in self.consts and x not in self.scalars for x in inputs):
            return False
        if any(not isinstance(self.scalars[x], (int, float, bool)) for x in inputs
               if x in self.scalars):
            return False
        tags = getattr(node.target, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags:
            return False
        for t in _tensor_leaves(val):
            if any(not isinstance(s, int) for s in t.shape) or t.numel() > FOLD_LIMIT:
                return False
        fetch = lambda x: self.consts[x] if x in self.consts else self.scalars[x]  # noqa: E731
        args = torch.fx.node.map_arg(node.args, fetch)
        kwargs = torch.fx.node.map_arg(node.kwargs, fetch)
        try:
            with torch.no_grad():
                result = node.target(*args, **kwargs)
        except Exception:  # torch refused: leave the node to its converter
            return False
        self.consts[node] = tuple(result) if isinstance(result, (tuple, list)) else result
        return True

    # -- naming -----------------------------------------------------------------------------
    def _bind(self, node: Any, out: Any, start: int) -> None:
        results = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        self.env[node] = tuple(results) if isinstance(out, (tuple, list)) else out
        new = {id(v) for m in self.graph.nodes[start:] for v in m.outputs}
        for k, v in enumerate(results):
            if v is None or id(v) not in new:
                continue
            name = node.name if len(results) == 1 else f"{node.name}_{k}"
            if not self.graph.uses_name(name) and name not in self.reserved:
                self.graph.rename(v, name)
                self.named.add(id(v))
            self.shape_sources.setdefault(tuple(v.type.shape), v)
        self._name_temps(node.name, start, results)

    def _name_temps(self, base: str, start: int, results: Sequence[Any]) -> None:
        keep = {id(v) for v in results if v is not None} | self.named
        for m in self.graph.nodes[start:]:
            for v in m.outputs:
                if id(v) not in keep:
                    self.graph.rename(v, self._temp_name(base))

    def _temp_name(self, base: str) -> str:
        while f"{base}:{self.temps}" in self.reserved or self.graph.uses_name(
                f"{base}:{self.temps}"):
            self.temps += 1
        return f"{base}:{self.temps}"

    # -- outputs ----------------------------------------------------------------------------
    def _output_names(self) -> list[str]:
        """The names of the user outputs (module docstring), from the program's output tree."""
        if self.output_names is None:
            self.output_names = self._name_outputs()
        return self.output_names

    def _name_outputs(self) -> list[str]:
        count = len(self.sig.user_outputs)
        pytree = self.torch.utils._pytree
        try:
            tree = pytree.tree_unflatten(list(range(count)), self.program.call_spec.out_spec)
            leaves = pytree.tree_flatten_with_path(tree)[0]
        except Exception:  # an output tree torch cannot rebuild: number the outputs
            return [f"output_{i}" for i in range(count)] if count != 1 else ["output"]
        names = [_path_name(path) for path, _ in leaves]
        if len(set(names)) != len(names):
            return [f"output_{i}" for i in range(count)]
        return names

    def _outputs(self, node: Any) -> None:
        names = iter(self._output_names())
        updates: list[tuple[str, Any]] = []
        for spec, arg in zip(self.sig.output_specs, node.args[0]):
            kind = spec.kind.name
            if kind in ("USER_OUTPUT", "LOSS_OUTPUT"):
                self._user_output(next(names), arg)
            elif kind == "BUFFER_MUTATION":
                updates.append((spec.target, arg))
            else:
                self._problem("(outputs)", "(outputs)", f"the forward changes {spec.target!r} "
                              f"in place (output kind {kind}); gradc graphs change nothing but "
                              "their state")
        placeholders = {self.sig.inputs_to_buffers.get(n.name): n
                        for n in self.program.graph.nodes if n.op == "placeholder"}
        for target, arg in updates:
            if arg in self.failed or placeholders.get(target) in self.failed:
                continue
            param = self._parameter(placeholders[target])
            self.graph.output(self.value(arg, f"update of {target!r}"), f"{param.name}{SUFFIX}")
        if self.rng is not None and self.rng is not self.rng_input:
            self.graph.output(self.rng, RNG_OUTPUT)

    def _user_output(self, name: str, arg: Any) -> None:
        if arg in self.failed or name in self.params or self.graph.uses_name(name) and any(
                v.name == name for v in self.graph.inputs):
            return  # (a clash of names is reported with the placeholders)
        if not hasattr(arg, "op") or not _is_tensors(arg.meta.get("val")):
            self._problem("(outputs)", "(outputs)", f"output {name!r} is {arg!r}, not a tensor "
                          "(a gradc graph outputs tensors)")
            return
        self.graph.output(self.value(arg, f"output {name!r}"), name)

    def _raise_problems(self) -> None:
        items = [msg for _, _, msg in self.problems]
        head = (f"torch program {self.graph.name!r}: {len(items)} unsupported "
                f"feature{'s' if len(items) > 1 else ''}: ")
        if len(items) == 1:
            head += items[0]
        else:
            head += _summary(self.problems) + "\n" + "\n".join(items)
        e: Any = (VerifyError if self.verify_only else UnsupportedError)(head)
        e.problems = items
        raise e

    # -- where a node comes from ------------------------------------------------------------
    def _where(self, node: Any) -> str:
        """``node 'conv_3' in 'layers.0.conv1', model.py:42`` (what torch recorded)."""
        parts = [f"node {node.name!r}"]
        stack = node.meta.get("nn_module_stack") or {}
        if stack:
            path = _module_path(str(list(stack.values())[-1][0]))
            if path:
                parts[0] += f" in {path!r}"
        source = self._source(node.meta.get("stack_trace") or "")
        if source:
            parts.append(source)
        return ", ".join(parts)

    def _source(self, trace: str) -> str:
        """The innermost frame of the trace outside torch's own files: ``model.py:42``."""
        frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
        if not frames:
            return ""
        own = [f for f in frames if not f[0].startswith(self.torch_dir)]
        file, line = (own or frames)[-1]
        return f"{os.path.basename(file)}:{line}"


def _is_tensors(val: Any) -> bool:
    """True for a tensor, or a tuple or list holding tensors (a node with several results)."""
    if isinstance(val, (tuple, list)):
        return any(_is_tensors(v) for v in val)
    return hasattr(val, "dtype") and hasattr(val, "shape")


def _tensor_leaves(val: Any) -> Iterator[Any]:
    if isinstance(val, (tuple, list)):
        for v in val:
            yield from _tensor_leaves(v)
    elif hasattr(val, "dtype") and hasattr(val, "shape"):
        yield val


def _module_path(path: str) -> str:
    """``layers.0.conv1`` from the forms torch has used: ``L['self'].layers[0].conv1``,
    ``L__self___layers_0_conv1`` is left as it is."""
    path = re.sub(r"^L\['self'\]\.?", "", path)
    return re.sub(r"\[(\d+)\]", r".\1", path).strip(".")


def _path_name(path: Sequence[Any]) -> str:
    """An output's name from its pytree key path (module docstring)."""
    if not path:
        return "output"
    parts: list[str] = []
    for i, key in enumerate(path):
        if hasattr(key, "idx"):
            parts.append(f"output_{key.idx}" if i == 0 else str(key.idx))
        elif hasattr(key, "key"):
            parts.append(str(key.key))
        else:
            parts.append(str(getattr(key, "name", key)))
    return ".".join(parts)


def _summary(problems: list[tuple[str, str, str]]) -> str:
    """Problems grouped by ATen operator in program order: ``aten.gelu.default (2 nodes,
    first node 'gelu' in 'mlp', model.py:12)``; those of the inputs and outputs by kind."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for op, where, msg in problems:
        groups.setdefault(op, []).append((where, msg))
    parts = []
    for op, items in groups.items():
        k = len(items)
        if op.startswith("("):  # "(inputs)", "(outputs)": no node to point at
            parts.append(f"{op[1:-1]} ({k} problem{'s' if k > 1 else ''}, first: "
                         f"{items[0][1]})")
        else:
            parts.append(f"{op} ({k} node{'s' if k > 1 else ''}, first {items[0][0]})")
    return ", ".join(parts) + " (the full message lists every feature, one per line: --debug)"


__all__ = ["TorchTranslator", "FOLD_LIMIT"]
