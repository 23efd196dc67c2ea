"""Optimization passes and the pass manager (one pass per file, named after the pass).

Passes (kebab-case names): ``canonicalize``, ``cse``, ``constant-fold``, ``dce``,
``relu-mask-from-output``, ``fuse-gradients``, ``fuse-elementwise``. ``default_pipeline()``
lists what ``"default"`` runs.
"""

from gradc.passes.manager import (PASSES, Instrument, Optimized, Pass, PassEvent, PassReport,
                                  PassResult, default_pipeline, optimize, register_pass, resolve)
from gradc.passes import (canonicalize, constant_fold, cse, dce,  # noqa: F401 (registration)
                          fuse_elementwise, fuse_gradients, relu_mask)
from gradc.passes.instruments import (DiffEach, DumpIR, PassStatistics, PrintAfterAll,
                                      PrintAfterChange, TimePasses, instruments_from_flags)
from gradc.passes.pattern import Pattern, apply_patterns
from gradc.passes.rewriter import Rewriter

__all__ = ["PASSES", "Instrument", "Optimized", "Pass", "PassEvent", "PassReport", "PassResult",
           "default_pipeline", "optimize", "register_pass", "resolve", "DiffEach", "DumpIR",
           "PassStatistics", "PrintAfterAll", "PrintAfterChange", "TimePasses",
           "instruments_from_flags", "Pattern", "apply_patterns", "Rewriter"]
