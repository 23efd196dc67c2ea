"""Targets: one subpackage per target, each a table from op name to lowering, behind ``TARGETS``.

``TARGETS`` maps a target's name to its ``Target`` (``gradc.backends.target``); the driver
(``gradc.compile``), the command line's choices, ``gradc check`` and the tests all read it. To
add a target, write a subpackage with a ``TARGET`` object and add it here.
"""

from __future__ import annotations

from gradc.backends import reference
from gradc.backends.c import target as c_target
import gradc.backends.cuda.target as cuda_target  # (this form: mypy misreads the from-form)
from gradc.backends.numpy import target as numpy_target
from gradc.backends.onnx import target as onnx_target
from gradc.backends.target import Lowered, Runner, Target

TARGETS: dict[str, Target] = {t.name: t for t in (
    reference.TARGET, numpy_target.TARGET, c_target.TARGET, onnx_target.TARGET,
    cuda_target.TARGET)}

__all__ = ["TARGETS", "Target", "Lowered", "Runner"]
