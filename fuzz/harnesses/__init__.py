"""The harnesses. Each module has ``generate(rng) -> payload`` (a new input, run in the worker),
``execute(payload) -> "ok" | "refused:<stage>"`` (raises on a crash), ``reduce(payload, test)``
(the minimizer's strategy) and ``files(payload)`` / ``load(...)`` for the regression store.
"""
