"""gradc: a compiler for neural-network training graphs (see README.md and docs/).

The public names below load on first use (PEP 562), so that ``import gradc.ir`` loads the IR
alone: importing any ``gradc.*`` module runs this file first, and an eager import of the API here
would load every pass and backend with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gradc.errors import (GradcError, InputError, ParseError, ResourceError, UnsupportedError,
                          VerifyError)

if TYPE_CHECKING:
    from gradc import ops
    from gradc.api import compile, from_onnx, grad, grad_names, to_onnx
    from gradc.executable import Executable
    from gradc.ir.core import Graph, Node, Value
    from gradc.ir.parser import parse
    from gradc.ir.types import DType, TensorType
    from gradc.passes import Optimized, optimize
    from gradc import optim
    from gradc.training import training_step
    from gradc.trainer import Trainer
    from gradc.torch_frontend import from_torch

__version__ = "0.1.0"

# Public name -> the module that defines it (a module itself where the two are equal).
_LAZY = {
    "Graph": "gradc.ir.core", "Node": "gradc.ir.core", "Value": "gradc.ir.core",
    "DType": "gradc.ir.types", "TensorType": "gradc.ir.types", "parse": "gradc.ir.parser",
    "ops": "gradc.ops", "examples": "gradc.examples", "Executable": "gradc.executable",
    "compile": "gradc.api", "grad": "gradc.api", "grad_names": "gradc.api",
    "from_onnx": "gradc.api",
    "to_onnx": "gradc.api", "optimize": "gradc.passes", "Optimized": "gradc.passes",
    "optim": "gradc.optim", "training_step": "gradc.training", "Trainer": "gradc.trainer",
    "from_torch": "gradc.torch_frontend",
}

__all__ = [
    "GradcError", "InputError", "ParseError", "ResourceError", "UnsupportedError", "VerifyError",
    "Graph", "Node",
    "Value", "DType", "TensorType", "ops", "parse", "compile", "Executable", "optimize",
    "Optimized", "grad", "grad_names", "from_onnx", "to_onnx", "optim", "training_step", "Trainer",
    "from_torch",
]


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use and keep the name here."""
    if name not in _LAZY:
        raise AttributeError(f"module 'gradc' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])  # lazy: see the module docstring
    value = module if module.__name__ == f"gradc.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
