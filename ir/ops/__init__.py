"""Every operator of gradc, defined once: one module per family, one registry of definitions.

Importing this package registers every op (``REGISTRY``: name -> ``OpDef``). The builders that
users call (``gradc.ops.relu(x)``) are made from these definitions in ``gradc.ir.builders``.
"""

from __future__ import annotations

from gradc.ir.ops import arith, elementwise, pooling, resample, slice  # noqa: F401  (register)
from gradc.ir.ops.registry import REGISTRY, OpDef, get_op

__all__ = ["REGISTRY", "OpDef", "get_op"]
