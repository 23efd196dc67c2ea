"""Every registered op has every part, on every target (DESIGN.md: "a test fails until ...").

An op is complete when its definition has ``infer``, ``reference``, ``vjp`` and a docstring, an
attribute schema that its builder and its ``infer`` agree with, and every target in
``gradc.backends.TARGETS`` lowers it for every dtype it accepts (or refuses it on purpose:
``REFUSED`` below, per (target, op, dtype), where each entry must say why; or has it still to
do: ``PENDING``, per (target, op), each entry saying what will lower it).

"Lowers it for a dtype" means more than a table entry: ``dtype_cases.py`` has one small case
per (op, dtype) (the op's other dtype axes and its lowering-relevant attribute choices inside
it), and each target runs all of them as one graph (one C build, one onnxruntime session; the
cuda target through its host harness, ``"cuda-host"``) and agrees with the reference as ``gradc
check`` requires (bits on ``numpy``, ``c`` and ``cuda``, its tolerance on ``onnx``). A failing
batch is bisected to name the pairs that fail. The ONNX importer's converters are covered in
``test_onnx_format.py``.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends import TARGETS
from gradc.check import output_scales
from gradc.errors import UnsupportedError
from gradc.ir.ops import REGISTRY
from gradc.ir.ops.registry import DERIVED, REQUIRED, TRAITS, Attr, OpDef, PerAxis

from dtype_cases import CASES, batch, cases, compare, op_dtypes
from helpers import compile_for, cuda_targets

# (target, op, dtype) -> why the target refuses the op on operands of that dtype on purpose
# (none today: every pair that stock onnxruntime lacks has a lowering of its own, such as
# float64 average_pooling's tap form and float64 convolution's MatMul decomposition).
REFUSED: dict[tuple[str, str, str], str] = {}

# (target, op) -> the work that will lower it: a gap being filled, not a decision. A target's
# ``lowerings()`` names only what it lowers, so an op it gains must leave this table (the test
# fails on a stale entry), and an op added to the registry without a lowering on some target
# needs an entry here (or in REFUSED) until it has one.
PENDING: dict[tuple[str, str], str] = {
}

OPS = sorted(REGISTRY)
PAIRS = cases()
KINDS = {"ints", "dims", "floats", "choice", "bool", "scalar", "dtype", "array"}
# Each compared with the reference; the cuda target in its modes (helpers.cuda_targets: the host
# harness everywhere, the GPU where one is asked for).
CHECKED = sorted(t for t in TARGETS if t not in ("reference", "cuda")) + list(cuda_targets())


def _base(target: str) -> str:
    """The TARGETS name of a test target (``"cuda-host"`` is the cuda target)."""
    return "cuda" if target.startswith("cuda") else target
OPTIONS: dict[str, dict[str, Any]] = {"c": {"openmp": False}}  # a shorter build, same kernels


def _refused_op(target: str, op: str) -> bool:
    return all((target, op, d.value) in REFUSED for d in op_dtypes(op))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_target_lowers_every_op(target, op):
    lowered = op in TARGETS[target].lowerings()
    refused = _refused_op(target, op)
    pending = (target, op) in PENDING
    assert lowered or refused or pending, f"target {target!r} has no lowering for {op} (add " \
                                          "one, or a documented entry to REFUSED or PENDING)"
    assert not (lowered and refused), f"{target}/{op} is lowered, so REFUSED is stale"
    assert not (lowered and pending), f"{target}/{op} is lowered, so PENDING is stale"


def test_refusals_say_why():
    for key, why in REFUSED.items():
        assert key[0] in TARGETS and (key[1], key[2]) in PAIRS and why.strip(), key
    for key, why in PENDING.items():
        assert key[0] in TARGETS and key[1] in REGISTRY and why.strip(), key
    assert not {(t, op) for t, op, _ in REFUSED} & set(PENDING)


def test_every_op_and_dtype_has_a_case():
    assert sorted(CASES) == [op for op in OPS if op != "fused"], "add the op to dtype_cases.CASES"
    for op, dtype in PAIRS:
        b = batch([(op, dtype)])  # builds: the case accepts the dtype the op's table lists
        assert b.outputs[(op, dtype)], (op, dtype)


class _Runs:
    """Per target: (op, dtype) -> None when the case agrees with the reference, else why."""

    def __init__(self) -> None:
        self.by_target: dict[str, dict[tuple[str, str], str | None]] = {}

    def get(self, target: str) -> dict[tuple[str, str], str | None]:
        if target not in self.by_target:
            pairs = [p for p in PAIRS if (_base(target), *p) not in REFUSED
                     and (_base(target), p[0]) not in PENDING]
            out: dict[tuple[str, str], str | None] = {}
            _run_bisected(target, pairs, out)
            self.by_target[target] = out
        return self.by_target[target]


def _run_bisected(target: str, pairs: Sequence[tuple[str, str]],
                  out: dict[tuple[str, str], str | None]) -> None:
    """Run ``pairs`` as one graph; when the target fails on it, halve until the failing cases
    stand alone."""
    b = batch(pairs)
    try:
        ref = gradc.compile(b.graph, target="reference", passes=None)(**b.feeds)
        got = compile_for(b.graph, target, passes=None, **OPTIONS.get(target, {}))(**b.feeds)
    except Exception as e:  # noqa: BLE001 - any failure is reported per case below
        if len(pairs) == 1:
            out[pairs[0]] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            return
        half = len(pairs) // 2
        _run_bisected(target, pairs[:half], out)
        _run_bisected(target, pairs[half:], out)
        return
    exact = TARGETS[_base(target)].exact
    for pair, names in b.outputs.items():
        want = {n: ref[n] for n in names}
        floors = output_scales(want)  # the case's own outputs, as `gradc check` on it alone
        libm = _base(target) in ("c", "cuda") and REGISTRY[pair[0]].transcendental
        bad = [n for n in names if not compare(exact, got[n], want[n],
                                               floors.get(want[n].dtype.str, 0.0), libm)]
        out[pair] = None if not bad else (
            f"output {bad[0]}: got {np.ravel(got[bad[0]])[:6]}, want {np.ravel(want[bad[0]])[:6]}")


@pytest.fixture(scope="module")
def runs() -> _Runs:
    return _Runs()


@pytest.mark.parametrize("op, dtype", PAIRS)
@pytest.mark.parametrize("target", CHECKED)
def test_every_target_runs_every_op_on_every_dtype(runs, target, op, dtype):
    if (_base(target), op) in PENDING:
        pytest.skip(PENDING[(_base(target), op)])
    if (_base(target), op, dtype) in REFUSED:
        b = batch([(op, dtype)])
        with pytest.raises(UnsupportedError, match=op):
            compile_for(b.graph, target, passes=None)(**b.feeds)
        return
    why = runs.get(target)[(op, dtype)]
    assert why is None, f"target {target!r}, {op} on {dtype}: {why} (give the pair a " \
                        "lowering, or a documented refusal to REFUSED)"


@pytest.mark.parametrize("op", OPS)
def test_every_op_has_its_semantic_parts(op):
    d = REGISTRY[op]
    cls = type(d)
    assert cls.infer is not OpDef.infer, f"{op} has no infer"
    assert cls.reference is not OpDef.reference or hasattr(d, "evaluate"), f"{op}: no reference"
    assert cls.vjp is not OpDef.vjp, f"{op} has no vjp rule (or an explicit refusal)"
    assert (cls.__doc__ or "").strip(), f"{op} has no docstring"
    assert d.traits <= TRAITS, op


@pytest.mark.parametrize("op", OPS)
def test_the_schema_is_the_builders_signature(op):
    d = REGISTRY[op]
    names = [a.name for a in d.attributes]
    assert len(set(names)) == len(names), f"{op}: an attribute declared twice"
    for a in d.attributes:
        assert isinstance(a, Attr) and a.kind in KINDS, (op, a)
        ok = (a.default in (REQUIRED, DERIVED) or isinstance(a.default, PerAxis)
              or isinstance(a.default, (bool, int, float, str)))
        assert ok, (op, a)
    params = list(inspect.signature(getattr(ops, op)).parameters)
    want = list(d.operands) + names
    if op == "constant":  # the one hand-written builder: an array, converted first
        assert params[0] == "array"
        return
    assert params == want, f"{op}: builder takes {params}, the definition says {want}"


@pytest.mark.parametrize("op", OPS)
def test_roles_are_consistent(op):
    d = REGISTRY[op]
    if d.anchors:
        assert "fusible" in d.traits, f"{op} anchors groups, so it must be fusible"
        assert d.anchor_operand in d.operands
    for name in (d.nan_from or ()) + d.shape_operands:
        assert name in d.operands, (op, name)
    if "elementwise" in d.traits:
        assert "fusible" in d.traits, op
