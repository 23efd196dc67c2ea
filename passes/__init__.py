"""Optimization passes and the pass manager (one pass per file, named after the pass)."""

from gradc.passes.manager import (PASSES, Optimized, Pass, PassReport, PassResult,
                                  default_pipeline, optimize, register_pass)
from gradc.passes import dce  # noqa: F401  (registers the pass)

__all__ = ["PASSES", "Optimized", "Pass", "PassReport", "PassResult", "default_pipeline",
           "optimize", "register_pass"]
