"""Every operator of gradc, defined once: one module per family, one registry of definitions.

Importing this package registers every op (``REGISTRY``: name -> ``OpDef``). The builders that
users call (``gradc.ops.relu(x)``) are made from these definitions in ``gradc.ir.builders``.
"""

from __future__ import annotations

# Importing a family module registers its ops.
from gradc.ir.ops import arith  # noqa: F401
from gradc.ir.ops import elementwise  # noqa: F401
from gradc.ir.ops import pooling  # noqa: F401
from gradc.ir.ops import resample  # noqa: F401
from gradc.ir.ops import slice  # noqa: F401
from gradc.ir.ops import elementwise_math  # noqa: F401
from gradc.ir.ops import reduce  # noqa: F401
from gradc.ir.ops import softmax  # noqa: F401
from gradc.ir.ops import movement  # noqa: F401
from gradc.ir.ops import convolution  # noqa: F401
from gradc.ir.ops import gemm  # noqa: F401
from gradc.ir.ops import average_pooling  # noqa: F401
from gradc.ir.ops import batch_norm  # noqa: F401
from gradc.ir.ops import rng  # noqa: F401
from gradc.ir.ops import adam  # noqa: F401
from gradc.ir.ops import activation  # noqa: F401
from gradc.ir.ops import normalization  # noqa: F401
from gradc.ir.ops import gather  # noqa: F401
from gradc.ir.ops.registry import REGISTRY, OpDef, get_op

__all__ = ["REGISTRY", "OpDef", "get_op"]
