"""A structure-aware fuzzer for gradc (see ``fuzz/README.md``).

Run it from the repository root: ``python -m fuzz --seconds 60``. Four harnesses (``ir``,
``onnx``, ``call``, ``cli``) generate and mutate inputs; each input runs in a worker child
process under an address-space and a time limit (``fuzz.supervisor``), crashes are grouped into
classes keyed by exception type and innermost gradc frame (``fuzz.common``), minimized
(``fuzz.minimize``) and kept under ``fuzz/regressions`` (``fuzz.store``).
"""

__all__: list[str] = []
