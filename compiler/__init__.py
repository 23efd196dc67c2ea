"""gradc: a compiler for neural-network training graphs (see README.md and API.md)."""

from gradc.errors import GradcError, InputError, ParseError, UnsupportedError, VerifyError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.types import DType, TensorType
from gradc import ops
from gradc.ir.parser import parse
from gradc.executable import Executable
from gradc.api import compile, from_onnx, grad, to_onnx
from gradc.passes import Optimized, optimize
from gradc import samples  # noqa: F401  (the built-in example graphs)

__version__ = "0.1.0"

__all__ = [
    "GradcError", "InputError", "ParseError", "UnsupportedError", "VerifyError", "Graph", "Node",
    "Value", "DType", "TensorType", "ops", "parse", "compile", "Executable", "optimize",
    "Optimized", "grad", "from_onnx", "to_onnx",
]
