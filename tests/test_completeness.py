"""Every registered op has every part, on every target (DESIGN.md: "a test fails until ...").

An op is complete when its definition has ``infer``, ``reference``, ``vjp`` and a docstring, an
attribute schema that its builder and its ``infer`` agree with, and every target in
``gradc.backends.TARGETS`` lowers it (or refuses it on purpose: ``REFUSED`` below, where each
entry must say why; or has it still to do: ``PENDING``, each entry saying what will lower it).
The ONNX importer's converters are covered in ``test_onnx_format.py``.
"""

from __future__ import annotations

import inspect

import pytest

from gradc import ops
from gradc.backends import TARGETS
from gradc.ir.ops import REGISTRY
from gradc.ir.ops.registry import DERIVED, REQUIRED, TRAITS, Attr, OpDef, PerAxis

# (target, op) -> why the target refuses the op on purpose (none today).
REFUSED: dict[tuple[str, str], str] = {}

# (target, op) -> the work that will lower it: a gap being filled, not a decision. A target's
# ``lowerings()`` names only what it lowers, so an op it gains must leave this table (the test
# fails on a stale entry), and an op added to the registry without a lowering on some target
# needs an entry here (or in REFUSED) until it has one.
_CUDA_NEXT = "issue 28 item 4, kernel families still to write for the cuda target: "
PENDING: dict[tuple[str, str], str] = {
    **{("cuda", op): _CUDA_NEXT + "gemm and convolution as tiled shared-memory kernels summing "
       "each output in the canonical order" for op in
       ("gemm", "convolution", "convolution_filter_grad")},
    **{("cuda", op): _CUDA_NEXT + "batch normalization with per-channel sums in the canonical "
       "order" for op in ("batch_normalization", "batch_normalization_grad",
                          "batch_normalization_training", "batch_normalization_training_grad")},
    **{("cuda", op): _CUDA_NEXT + "average pooling as gathers (a thread per output element)"
       for op in ("average_pooling", "average_pooling_grad")},
    ("cuda", "adam_optimizer"): _CUDA_NEXT + "the optimizer update of all parameters in one "
                                             "kernel",
    ("cuda", "random_generator"): _CUDA_NEXT + "Philox4x32-10 per element, as the C target",
}

OPS = sorted(REGISTRY)
KINDS = {"ints", "dims", "floats", "choice", "bool", "scalar", "dtype", "array"}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_target_lowers_every_op(target, op):
    lowered = op in TARGETS[target].lowerings()
    refused = (target, op) in REFUSED
    pending = (target, op) in PENDING
    assert lowered or refused or pending, f"target {target!r} has no lowering for {op} (add " \
                                          "one, or a documented entry to REFUSED or PENDING)"
    assert not (lowered and refused), f"{target}/{op} is lowered, so REFUSED is stale"
    assert not (lowered and pending), f"{target}/{op} is lowered, so PENDING is stale"


def test_refusals_say_why():
    for key, why in {**REFUSED, **PENDING}.items():
        assert key[0] in TARGETS and key[1] in REGISTRY and why.strip(), key
    assert not set(REFUSED) & set(PENDING)


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
