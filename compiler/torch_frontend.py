"""``gradc.from_torch``: a PyTorch module's forward as a gradc graph, through ``torch.export``.

A frontend beside the ONNX importer, with the same shape:

1. ``torch.export.export`` captures the module in its current mode (``train()``: training-mode
   batch normalization, which updates its running statistics, and dropout; ``eval()``: their
   inference forms). A ``.pt2`` file written by ``torch.export.save`` is read with
   ``torch.export.load`` instead (``load_pt2``).
2. ``run_decompositions`` lowers the program to core ATen with ``decomposition_table``:
   PyTorch's default table, less the operators gradc has natively (``KEPT``), so that a linear
   layer stays one ``gemm`` (and a symbolic batch is never merged into another axis), an
   adaptive pooling to 1x1 stays a mean, an upsampling stays one ``resample``, a loss stays
   gradc's composite, and scaled dot-product attention is translated as PyTorch's
   decomposition writes it (``torch_transformer.py``; torch's own decomposition of it breaks
   a later ``view`` in ``transformers``' GPT-2). Convolution, batch normalization, max
   pooling with indices, average pooling, softmax, dropout, embedding, layer norm and GELU
   are core ATen operators: the default table keeps them already.
3. ``TorchTranslator`` (``torch_translate.py``) translates the ATen graph node by node through
   the table of ``gradc.torch_ops``; what it cannot translate is listed in one
   ``UnsupportedError``.

PyTorch is imported here alone, lazily: ``import gradc`` never loads it, and without it
``from_torch`` raises ``UnsupportedError`` saying how to install it.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import warnings
from typing import Any, Iterator, Mapping

from gradc.errors import ParseError, UnsupportedError, VerifyError
from gradc.ir.core import Graph
from gradc.torch_translate import TorchTranslator

INSTALL = "pip install 'gradc[torch]'"
MIN_TORCH = (2, 5)

# Operators of PyTorch's default decomposition table that gradc translates as they are.
KEPT = ("linear.default", "matmul.default", "adaptive_avg_pool2d.default",
        "upsample_nearest1d.vec", "upsample_nearest1d.default", "upsample_nearest2d.default",
        "_upsample_nearest_exact1d.vec", "_upsample_nearest_exact1d.default",
        "_upsample_nearest_exact2d.vec", "_upsample_nearest_exact2d.default",
        "upsample_linear1d.vec", "upsample_linear1d.default",
        "nll_loss_forward.default", "nll_loss2d_forward.default", "mse_loss.default",
        "scaled_dot_product_attention.default")


def import_torch() -> Any:
    """The ``torch`` module; UnsupportedError when it is missing or older than 2.5."""
    try:
        import torch  # lazy: PyTorch is an optional extra that only this frontend needs
    except ImportError:
        raise UnsupportedError(f"from_torch: PyTorch is not installed ({INSTALL})") from None
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]
                    if p.isdigit())
    if version < MIN_TORCH:
        raise UnsupportedError(f"from_torch: needs PyTorch >= 2.5, found {torch.__version__} "
                               f"({INSTALL})")
    return torch


def decomposition_table(torch: Any) -> Any:
    """PyTorch's core-ATen decompositions, less the operators gradc keeps (``KEPT``)."""
    table = torch.export.default_decompositions()
    for name in KEPT:
        packet, overload = name.rsplit(".", 1)
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:
            table.pop(op, None)
    return table


def decompose(program: Any) -> Any:
    """The exported program lowered to the core ATen operators that ``from_torch`` reads."""
    table = decomposition_table(import_torch())
    with quiet():
        return program.run_decompositions(table)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """torch's own deprecation notices (``run_decompositions`` copies its pytree specs with a
    deprecated check) and its log of a file it cannot read (gradc reports that itself) are not
    shown to gradc's users."""
    log = logging.getLogger("torch.export")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        log.setLevel(level)


def from_torch(module: Any, args: Any, kwargs: Mapping[str, Any] | None = None,
               dynamic_shapes: Any = None) -> Graph:
    """The forward of a ``torch.nn.Module`` as a gradc graph (README.md, "Start from PyTorch").

    Inputs are named after the forward's parameters; parameters and state after the module's
    ``state_dict``; ``torch.export.Dim`` names in ``dynamic_shapes`` become gradc symbols.
    """
    torch = import_torch()
    if not isinstance(module, torch.nn.Module):
        raise VerifyError(f"from_torch: module: expected a torch.nn.Module, got "
                          f"{type(module).__name__}")
    args = (args,) if isinstance(args, torch.Tensor) else args
    if not isinstance(args, (tuple, list)):
        raise VerifyError(f"from_torch: args: expected a tuple of example inputs, got "
                          f"{type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise VerifyError(f"from_torch: kwargs: expected a mapping, got {type(kwargs).__name__}")
    try:
        program = torch.export.export(module, tuple(args), dict(kwargs or {}),
                                      dynamic_shapes=dynamic_shapes)
    except Exception as e:  # torch.export raises many kinds (UserError, TorchRuntimeError, ...)
        raise UnsupportedError(f"from_torch: torch.export could not capture "
                               f"{type(module).__name__}: {_first_line(e)}") from None
    symbols = dim_names(torch, module, args, kwargs, dynamic_shapes, program)
    return translate(program, type(module).__name__, symbols)


def translate(program: Any, name: str = "main", symbols: Mapping[str, str] | None = None
              ) -> Graph:
    """An exported program (``torch.export.ExportedProgram``) as a gradc graph."""
    torch = import_torch()
    try:
        program = decompose(program)
    except Exception as e:  # a decomposition torch itself cannot run
        raise UnsupportedError(f"from_torch: torch could not decompose {name!r} to core ATen: "
                               f"{_first_line(e)}") from None
    return TorchTranslator(torch, program, name, dict(symbols or {})).run()


def load_pt2(path: str | os.PathLike[str]) -> Graph:
    """A ``.pt2`` file written by ``torch.export.save``, as a gradc graph."""
    p = os.fspath(path)
    if not os.path.exists(p):
        raise ParseError(f"{p}: no such file")
    if os.path.isdir(p):
        raise ParseError(f"{p}: is a directory, not a .pt2 file")
    torch = import_torch()
    try:
        with quiet():
            program = torch.export.load(p)
    except Exception as e:  # zip, pickle and schema errors of many kinds
        raise ParseError(f"{p}: not a readable torch.export program (.pt2) "
                         f"({type(e).__name__}: {_first_line(e)})") from None
    stem = os.path.splitext(os.path.basename(p))[0] or "main"
    return translate(program, stem)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# -- the names of symbolic sizes ---------------------------------------------------------------

def dim_names(torch: Any, module: Any, args: Any, kwargs: Any, dynamic_shapes: Any,
              program: Any) -> dict[str, str]:
    """torch's symbol (``s23``) -> the ``torch.export.Dim`` name the user gave (``batch``).

    ``dynamic_shapes`` is read as torch reads it: a mapping by the forward's argument names or
    a sequence in their order; per tensor, a mapping from axis to Dim or a sequence of Dims.
    Dims without a name of their own (``Dim.AUTO``) keep torch's symbol."""
    if dynamic_shapes is None:
        return {}
    try:
        bound = inspect.signature(module.forward).bind(*args, **(kwargs or {}))
    except (TypeError, ValueError):
        return {}
    names = list(bound.arguments)
    if isinstance(dynamic_shapes, Mapping):
        specs = [dynamic_shapes.get(n) for n in names]
    else:
        specs = list(dynamic_shapes) + [None] * max(0, len(names) - len(dynamic_shapes))
    pairs: list[tuple[Any, Any]] = []
    for arg, spec in zip(bound.arguments.values(), specs):
        _pair(torch, arg, spec, pairs)
    found: dict[int, dict[int, str]] = {}
    for tensor, spec in pairs:
        dims = spec.items() if isinstance(spec, Mapping) else enumerate(spec)
        for axis, d in dims:
            name = getattr(d, "__name__", None)
            if name and isinstance(axis, int):
                found.setdefault(id(tensor), {})[axis] = name
    return _symbols_of_inputs(torch, program, args, kwargs, found)


def _pair(torch: Any, arg: Any, spec: Any, out: list[tuple[Any, Any]]) -> None:
    """(tensor, its spec) pairs of one argument, through lists, tuples and dicts."""
    if spec is None:
        return
    if isinstance(arg, torch.Tensor):
        if isinstance(spec, (Mapping, list, tuple)):
            out.append((arg, spec))
    elif isinstance(arg, (list, tuple)) and isinstance(spec, (list, tuple)):
        for a, s in zip(arg, spec):
            _pair(torch, a, s, out)
    elif isinstance(arg, Mapping) and isinstance(spec, Mapping):
        for k, a in arg.items():
            _pair(torch, a, spec.get(k), out)


def _symbols_of_inputs(torch: Any, program: Any, args: Any, kwargs: Any,
                       found: dict[int, dict[int, str]]) -> dict[str, str]:
    """Match the example tensors, in pytree order, with the program's user inputs."""
    leaves = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs or {})))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    user = [n for n in program.graph.nodes if n.op == "placeholder"
            and n.name in program.graph_signature.user_inputs]
    out: dict[str, str] = {}
    for t, node in zip(tensors, user):
        val = node.meta.get("val")
        for axis, name in found.get(id(t), {}).items():
            if val is not None and axis < val.dim():
                size = val.shape[axis]
                expr = getattr(getattr(size, "node", None), "expr", None)
                if expr is not None and getattr(expr, "is_Symbol", False):
                    out.setdefault(str(expr), name)
    return out


__all__ = ["from_torch", "translate", "load_pt2", "decompose", "decomposition_table",
           "import_torch", "KEPT", "INSTALL"]
