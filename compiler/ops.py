"""``gradc.ops``: the operator builders (defined once in ``gradc.ir.ops``)."""

from gradc.ir.ops import *  # noqa: F401,F403
from gradc.ir.ops import __all__  # noqa: F401
