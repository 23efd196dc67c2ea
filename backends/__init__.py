"""Targets: one module per target, each a table from op name to emitter or evaluator."""
