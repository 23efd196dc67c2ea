"""Canonicalization: local rewrites that simplify gradient graphs, each bit-exact.

    %r = relu(%x) : f32[4]
    %a = relu_grad(%r, %dy) : f32[4]     ->   %a = relu_grad(%x, %dy) : f32[4]
    %b = relu_grad(%x, %a) : f32[4]           (%b is %a: the same mask twice)

Every rule states its exact condition in its docstring: the rewritten graph gives the same bits
as the original on every input, -0.0 and NaN payloads included (SPEC.md §1.6), except that
quiet-NaN payloads produced by arithmetic are not compared beyond "NaN" where SPEC.md allows.
The rules only ever look at a node's operands and their producers (``facts.py``), so the
pattern driver runs them in linear time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.ops.resample import axis_is_identity
from gradc.passes.facts import add_zero_exact, never_nan, positive_base, value_range
from gradc.passes.manager import Pass, PassResult, register_pass
from gradc.passes.pattern import Bindings, Pattern, apply_patterns
from gradc.passes.rewriter import Rewriter
from gradc.passes.transpose_rules import RULES as TRANSPOSE_RULES


def _zero(dtype_is_float: bool) -> float | int:
    return 0.0 if dtype_is_float else 0


@dataclass(frozen=True)
class ReluGradOfRelu(Pattern):
    """``relu_grad(relu(x), dy) -> relu_grad(x, dy)``.

    Proof: ``relu(x) > 0`` exactly where ``x > 0`` (``relu`` gives +0 for x <= 0 and NaN), and
    relu_grad reads its mask only through ``> 0``; both results are ``dy`` or +0 elementwise.
    """

    name = "relu-grad-of-relu"
    roots = ("relu_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        x = rw.operand(node, 0)
        base = positive_base(x, rw)
        return None if base is x else {"x": base}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [rw.create("relu_grad", [b["x"], rw.operand(node, 1)])]


@dataclass(frozen=True)
class ReluOfRelu(Pattern):
    """``relu(relu(x)) -> relu(x)`` (the inner value itself).

    Proof: ``relu(x)`` is x where ``x > 0`` and +0 elsewhere (NaN included); relu keeps a
    positive value and maps +0 to +0, bit for bit. Besides saving work, this keeps a chain of n
    relus from costing the relu_grad rules n * n / DEPTH rewrites: the chain collapses in one
    topological sweep, so every ``positive_base`` is one step away.
    """

    name = "relu-of-relu"
    roots = ("relu",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        inner = rw.def_of(rw.operand(node, 0), "relu")
        return None if inner is None else {"inner": rw.find(inner.outputs[0])}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [b["inner"]]


@dataclass(frozen=True)
class ReluGradTwice(Pattern):
    """``relu_grad(x, relu_grad(x, dy)) -> relu_grad(x, dy)`` (the inner value itself).

    Proof: where ``x > 0`` both give dy; elsewhere the inner gives +0 and the outer +0.
    Masks are compared through ``positive_base``, so ``relu(x)`` and ``x`` count as the same.
    """

    name = "relu-grad-twice"
    roots = ("relu_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        inner = rw.def_of(rw.operand(node, 1), "relu_grad")
        if inner is None:
            return None
        same = positive_base(rw.operand(inner, 0), rw) is positive_base(rw.operand(node, 0), rw)
        return {"inner": rw.find(inner.outputs[0])} if same else None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [b["inner"]]


@dataclass(frozen=True)
class ReluGradPositive(Pattern):
    """``relu_grad(x, dy) -> dy`` when every element of ``x`` is provably ``> 0`` and not NaN.

    Proof: the mask is then true everywhere, and relu_grad copies dy unchanged there.
    """

    name = "relu-grad-positive"
    roots = ("relu_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        x = rw.operand(node, 0)
        r = value_range(x, rw)
        return {} if r is not None and r[0] > 0 and never_nan(x, rw) else None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [rw.operand(node, 1)]


@dataclass(frozen=True)
class ClipGradIdentity(Pattern):
    """``clip_grad(x, dy, min, max) -> dy`` when every non-NaN ``x`` satisfies ``min < x < max``.

    Exact condition: clip_grad returns dy at an element iff neither ``x <= min`` nor
    ``x >= max`` holds (NaN x: both false, dy passes); at any other element it returns +0,
    which differs from dy unless dy is +0 there. So the rewrite is exact iff every element's
    non-NaN value lies strictly inside (min, max). Knowing nothing about x, that never holds:
    for floats x may be -inf and ``-inf <= min`` for every bound (min is never NaN, possibly
    -inf); for integers min is converted to the dtype, so ``dtype.min <= min``. Hence the rule
    needs a proven range (``value_range``: x made by ``clip``, ``relu`` or a constant), e.g.
    ``clip_grad(clip(z, 0, 6), dy, -1, 7) -> dy``; with an unknown x it never applies.
    """

    name = "clip-grad-identity"
    roots = ("clip_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        r = value_range(rw.operand(node, 0), rw)
        if r is None:
            return None
        inside = node.attrs["min"] < r[0] and r[1] < node.attrs["max"]
        return {} if inside else None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [rw.operand(node, 1)]


@dataclass(frozen=True)
class ClipGradMerge(Pattern):
    """``clip_grad(x, clip_grad(x, dy, a, b), c, d) -> clip_grad(x, dy, max(a, c), min(b, d))``.

    Proof: dy passes both iff (a < x < b or x is NaN) and (c < x < d or x is NaN), which is
    max(a, c) < x < min(b, d) or x is NaN; every other element is +0 in both forms.
    """

    name = "clip-grad-merge"
    roots = ("clip_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        inner = rw.def_of(rw.operand(node, 1), "clip_grad")
        if inner is None or rw.operand(inner, 0) is not rw.operand(node, 0):
            return None
        return {"inner": inner}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        inner: Node = b["inner"]
        lo = max(inner.attrs["min"], node.attrs["min"])
        hi = min(inner.attrs["max"], node.attrs["max"])
        return [rw.create("clip_grad", [rw.operand(node, 0), rw.operand(inner, 1)],
                          {"min": lo, "max": hi})]


def _same_mask(clip_x: Value, relu_x: Value, rw: Rewriter) -> bool:
    """``clip_x > 0`` exactly where ``relu_x > 0``, and ``clip_x`` is never NaN."""
    return positive_base(clip_x, rw) is positive_base(relu_x, rw) and never_nan(clip_x, rw)


@dataclass(frozen=True)
class ReluGradOfClipGrad(Pattern):
    """``relu_grad(z, clip_grad(x, dy, min, max))``: the relu mask is implied by the clip mask.

    With ``x > 0`` exactly where ``z > 0`` (``x`` is ``z`` or ``relu(z)``) and ``x`` never NaN:
    dy passes both iff ``min < x < max`` and ``x > 0``, i.e. ``max(min, 0) < x < max``. So for
    ``min >= 0`` the result is the clip_grad itself, otherwise ``clip_grad(x, dy, 0, max)``.
    NaN matters: clip_grad passes dy at a NaN x where relu_grad gives +0, so for a float x that
    may be NaN the rule does not apply. ``x = relu(z)`` (what autodiff builds for
    ``clip(relu(z))``) is never NaN.
    """

    name = "relu-grad-of-clip-grad"
    roots = ("relu_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        inner = rw.def_of(rw.operand(node, 1), "clip_grad")
        if inner is None or not _same_mask(rw.operand(inner, 0), rw.operand(node, 0), rw):
            return None
        return {"inner": inner}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        inner: Node = b["inner"]
        if inner.attrs["min"] >= 0:
            return [rw.find(inner.outputs[0])]
        x = rw.operand(inner, 0)
        return [rw.create("clip_grad", [x, rw.operand(inner, 1)],
                          {"min": _zero(x.type.dtype.is_float), "max": inner.attrs["max"]})]


@dataclass(frozen=True)
class ClipGradOfReluGrad(Pattern):
    """``clip_grad(x, relu_grad(z, dy), min, max) -> clip_grad(x, dy, max(min, 0), max)``.

    Same condition and proof as ``relu-grad-of-clip-grad`` (x > 0 exactly where z > 0, x never
    NaN): dy passes both iff ``min < x < max`` and ``x > 0``.
    """

    name = "clip-grad-of-relu-grad"
    roots = ("clip_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        inner = rw.def_of(rw.operand(node, 1), "relu_grad")
        if inner is None or not _same_mask(rw.operand(node, 0), rw.operand(inner, 0), rw):
            return None
        return {"inner": inner}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        x = rw.operand(node, 0)
        lo = node.attrs["min"]
        lo = lo if lo >= 0 else _zero(x.type.dtype.is_float)
        return [rw.create("clip_grad", [x, rw.operand(b["inner"], 1)],
                          {"min": lo, "max": node.attrs["max"]})]


def window_is_identity(src: Sequence, dst: Sequence, off: Sequence[int], size: Sequence,
                       stride: Sequence[int]) -> bool:
    """True if a slice window maps every index of ``dst`` to the same index of ``src``.

    Per axis: the sizes are equal (as written), the offset is 0, and either the stride is 1
    (then the window is the whole axis) or the axis has the static size 1 (one element, taken
    from index ``off + (size - 1 if stride < 0 else 0) = 0``).
    """
    for s, d, o, n, st in zip(src, dst, off, size, stride):
        if s != d or o != 0:
            return False
        if not (st == 1 or (d == 1 and n == 1)):
            return False
    return True


@dataclass(frozen=True)
class _WholeWindowIdentity(Pattern):
    """Shared by slice and slice_grad: the node is its operand when the window is the whole
    tensor with unit strides."""

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        a = node.attrs
        ok = window_is_identity(node.inputs[0].type.shape, a["output_sizes"],
                                a["input_window_offsets"], a["input_window_sizes"],
                                a["input_window_strides"])
        return {} if ok else None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [rw.operand(node, 0)]


@dataclass(frozen=True)
class SliceGradIdentity(_WholeWindowIdentity):
    """``slice_grad(dy, ...) -> dy`` when the window is the whole tensor with unit strides.

    Proof: every result element is then stored from the dy element of the same index (a copy),
    and no element is left at +0.
    """

    name = "slice-grad-identity"
    roots = ("slice_grad",)


@dataclass(frozen=True)
class SliceIdentity(_WholeWindowIdentity):
    """``slice(x, ...) -> x`` when the window is the whole tensor with unit strides (a copy)."""

    name = "slice-identity"
    roots = ("slice",)


def resample_is_identity(attrs: dict, src: Sequence, dst: Sequence) -> bool:
    """True if nearest resampling maps every coordinate of ``dst`` to the same index of ``src``.

    Checked exactly with ``axis_is_identity`` (float32 coordinates, rounding, clamping). Only static
    axes qualify: beyond 2**23 elements float32 coordinates stop being exact, so no scale and
    offsets are the identity for every size a symbol might take. Linear mode never qualifies: its
    second tap (weight 0) adds ``0 * dy``, which is NaN for an infinite dy.
    """
    if attrs["interpolation_mode"] != "nearest" or tuple(src) != tuple(dst):
        return False
    if any(isinstance(d, str) for d in src):
        return False
    return all(axis_is_identity(n, attrs["scales"][d], attrs["input_pixel_offsets"][d],
                                attrs["output_pixel_offsets"][d], attrs["rounding_direction"])
               for d, n in enumerate(src))


@dataclass(frozen=True)
class ResampleGradIdentity(Pattern):
    """``resample_grad(dy, ...) -> add(dy, +0)`` when nearest taps map every index to itself.

    Exact condition: each result element then receives exactly one term, so it is
    ``+0 + 1 * dy`` rounded once, which is ``dy`` except that ``-0.0`` becomes ``+0.0`` (and a
    signaling NaN is quieted): bit for bit what ``add(dy, +0)`` computes, not ``dy`` itself. The
    ``add-zero`` rule then removes the addition where dy provably holds no -0.0.
    """

    name = "resample-grad-identity"
    roots = ("resample_grad",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        ok = resample_is_identity(dict(node.attrs), node.inputs[0].type.shape,
                                  node.attrs["output_sizes"])
        return {} if ok else None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        dy = rw.operand(node, 0)
        zero = rw.create("constant", [], {"value": np.zeros((), dy.type.dtype.numpy)})
        return [rw.create("add", [dy, zero])]


@dataclass(frozen=True)
class ResampleIdentity(Pattern):
    """``resample(x, ...) -> x`` when nearest taps map every index to itself (a selection)."""

    name = "resample-identity"
    roots = ("resample",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        ok = resample_is_identity(dict(node.attrs), node.inputs[0].type.shape,
                                  node.attrs["output_sizes"])
        return {} if ok else None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [rw.operand(node, 0)]


def _is_plus_zero(v: Value, rw: Rewriter) -> bool:
    p = rw.def_of(v, "constant")
    if p is None:
        return False
    a = np.asarray(p.attrs["value"])
    return bool(((a == 0) & ~np.signbit(a)).all())


@dataclass(frozen=True)
class AddZero(Pattern):
    """``add(v, +0) -> v`` (either order) when ``v + (+0.0)`` provably gives back ``v``'s bits.

    Integers: always. Floats: when v holds no -0.0 and no signaling NaN (``add_zero_exact``).
    The result must have v's type (a zero of higher rank would broadcast v).
    """

    name = "add-zero"
    roots = ("add",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        a, b = rw.operands(node)
        for v, z in ((a, b), (b, a)):
            if v.type == node.outputs[0].type and _is_plus_zero(z, rw) and add_zero_exact(v, rw):
                return {"v": v}
        return None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [b["v"]]


@dataclass(frozen=True)
class NegNeg(Pattern):
    """``neg(neg(x)) -> x``: negation flips the sign bit (integers wrap), so twice is a no-op."""

    name = "neg-neg"
    roots = ("neg",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        inner = rw.def_of(rw.operand(node, 0), "neg")
        return None if inner is None else {"x": rw.operand(inner, 0)}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [b["x"]]


@dataclass(frozen=True)
class NoOp(Pattern):
    """``identity(x)``, ``cast(x, x.dtype)``, ``reshape(x, x.shape)``, ``expand(x, like)`` of
    the same shape -> ``x``: each is a plain copy. An ``identity`` that names a graph output is
    kept (it is how a value is output under a second name)."""

    name = "no-op"
    roots = ("identity", "cast", "reshape", "expand")

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        x, out = rw.operand(node, 0), node.outputs[0]
        if node.op == "identity" and rw.is_output(out):
            return None
        return {} if x.type == out.type else None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        return [rw.operand(node, 0)]


RULES: tuple[Pattern, ...] = (
    ReluOfRelu(), ReluGradOfRelu(), ReluGradTwice(), ReluGradPositive(), ReluGradOfClipGrad(),
    ClipGradIdentity(), ClipGradMerge(), ClipGradOfReluGrad(), SliceGradIdentity(),
    SliceIdentity(), ResampleGradIdentity(), ResampleIdentity(), AddZero(), NegNeg(), NoOp(),
    *TRANSPOSE_RULES,
)


@register_pass
@dataclass
class Canonicalize(Pass):
    """Apply the canonicalization rules to a fixpoint (``rules``: a subset by name)."""

    name = "canonicalize"
    rules: tuple[str, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.rules is None:
            return
        names = {r.name for r in RULES}
        if isinstance(self.rules, str) or not all(isinstance(r, str) for r in self.rules):
            raise VerifyError(f"canonicalize: rules: expected a tuple of rule names, got "
                              f"{self.rules!r}")
        unknown = [r for r in self.rules if r not in names]
        if unknown:
            raise VerifyError(f"canonicalize: rules: expected names from {', '.join(sorted(names))}"
                              f", got {unknown[0]!r}")

    def run(self, graph: Graph) -> PassResult:
        chosen = [r for r in RULES if self.rules is None or r.name in self.rules]
        new, changed, stats = apply_patterns(graph, chosen)
        return PassResult(new, changed, stats)
