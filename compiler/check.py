"""``gradc check``: run a graph on every target and compare with the reference target.

The ``numpy`` and ``c`` targets keep the reference's canonical order and roundings, so they are
expected to reproduce it bit for bit: their outputs must be identical (a NaN may carry
another payload; every other bit, -0.0 included, must match). Other targets (``onnx``: onnxruntime
sums in its own order) get a whole-graph tolerance: a graph mixes exact and summing ops, so per
output the check accepts ``|got - ref| <= 64 * eps(dtype) * max|ref|`` (plus the dtype's smallest
normal), requires NaN where the reference has NaN and equal infinities. The per-op tests hold
every target to its op's own tolerance; this is the end-to-end view.
Finite differences (``--grad``) are central differences in float64 on a float64 copy of the
graph, at a few random coordinates of each differentiated input and parameter.

Parameters are never randomized: every run uses each parameter's own value (a model's weights
are what its outputs are checked with). Only a parameter without a value (text IR parsed
without its values) gets random values, like an input. ``--grad`` differentiates with respect to
every floating-point input and parameter (``wrt="all"``); finite differences visit at most
``MAX_FD_PARAMETERS`` parameters (spread over the graph's list) at ``PARAMETER_POINTS``
coordinates each, so that a real model is checked in seconds.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from gradc.api import compile
from gradc.api import grad as make_grad
from gradc.api import grad_names
from gradc.backends import TARGETS as ALL_TARGETS
from gradc.errors import GradcError, UnsupportedError
from gradc.executable import check_sizes, memory_limit
from gradc.ir.core import Graph, Value
from gradc.ir.types import TensorType
from gradc.ir.ops.gather import index_size
from gradc.ir.ops.registry import get_op, make_node

TARGETS = tuple(k for k in ALL_TARGETS if k != "reference")  # each compared with the reference
MAX_FD_PARAMETERS = 12
PARAMETER_POINTS = 2


def random_inputs(g: Graph, shapes: Mapping[str, int],
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for every input and every parameter without a value (symbolic dims
    default to 2); a parameter with a value keeps it (the Executable feeds it).

    A graph whose values would not fit in memory with these sizes is refused first
    (``ResourceError``, naming the value), before anything is allocated.
    """
    bindings = {s: shapes.get(s, 2) for v in g.inputs for s in v.type.symbols}
    check_sizes(g, bindings, memory_limit())
    rng = np.random.default_rng(seed)
    limits = _index_limits(g, bindings)
    out = {}
    for v in list(g.inputs) + [p for p in g.parameters if p.value is None]:
        shape = tuple(shapes.get(d, 2) if isinstance(d, str) else d for d in v.type.shape)
        dt = v.type.dtype.numpy
        if dt.kind == "f":
            out[v.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            out[v.name] = rng.integers(0, 2, shape).astype(dt)
        else:
            info = np.iinfo(dt)
            lo, hi = max(info.min, -100), min(info.max, 100)
            if v in limits:  # indices of a gather: within range (SPEC-transformers §26.3)
                lo, hi = max(lo, -limits[v]), min(hi, limits[v] - 1)
            out[v.name] = rng.integers(lo, hi + 1, shape, dtype=dt)
    return out


def _index_limits(g: Graph, bindings: Mapping[str, int]) -> dict[Value, int]:
    """The inputs that ops checking their indices when run read as ``indices`` (gather), and
    the smallest size their values must lie within (``-size..size-1``)."""
    out: dict[Value, int] = {}
    for n in g.nodes:
        if n.body is None and n.op != "constant" and get_op(n.op).raises_input_error:
            v = n.inputs[get_op(n.op).operands.index("indices")]
            out[v] = min(out.get(v, index_size(n, bindings)), index_size(n, bindings))
    return out


def identical(got: np.ndarray, ref: np.ndarray) -> bool:
    """Same shape, dtype and bits, except that a NaN may carry another payload."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    if ref.dtype.kind != "f":
        return bool(np.array_equal(got, ref))
    bits = np.dtype(f"u{ref.dtype.itemsize}")
    same = got.view(bits) == ref.view(bits)
    return bool((same | (np.isnan(got) & np.isnan(ref))).all())


def max_error(got: np.ndarray, ref: np.ndarray, floor: float = 0.0) -> tuple[float, bool]:
    """(largest difference, within the whole-graph tolerance) for one output: 64 ulps of its
    largest value, or of ``floor`` where that is larger."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return float("inf"), False
    if ref.dtype.kind != "f":
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        return float(diff.max(initial=0.0)), bool((diff == 0).all())
    g, r = got.astype(np.float64), ref.astype(np.float64)
    nan_ok = bool((np.isnan(g) == np.isnan(r)).all())
    inf_ok = bool((np.isinf(r) <= (g == r)).all())
    finite = np.isfinite(r) & np.isfinite(g)
    diff = np.abs(g[finite] - r[finite])
    err = float(diff.max(initial=0.0))
    scale = max(float(np.abs(r[finite]).max(initial=0.0)), floor)
    info = np.finfo(ref.dtype)
    tol = 64 * float(info.eps) * scale + float(info.tiny)
    return err, nan_ok and inf_ok and err <= tol


def compare_targets(g: Graph, targets: Sequence[str], shapes: Mapping[str, int],
                    seed: int = 0) -> tuple[list[str], bool]:
    """Rows of a table of the largest differences from the reference, and whether all pass."""
    feeds = random_inputs(g, dict(shapes), seed)
    ref = compile(g, target="reference", passes=None)(**feeds)
    rows = [f"{'target':10} {'output':24} {'max |diff|':>12}  status"]
    ok = True
    libm = uses_transcendental(g)  # the C and CUDA targets' libm may differ by ulps (§9.5)
    floors = output_scales(ref)
    for t in targets:
        try:
            ex = compile(g, target=t)
            out = ex(**feeds)
        except UnsupportedError as e:
            rows.append(f"{t:10} {'-':24} {'-':>12}  skipped ({str(e).splitlines()[0]})")
            continue
        for name, want in ref.items():
            err, good = max_error(out[name], want, floors.get(want.dtype.str, 0.0))
            # ex.exact: no sum reordered by an option (the cuda target's sums="split")
            if ex.exact and not (t in ("c", "cuda") and libm):
                # canonical order and roundings: bit for bit (§1.6)
                good = identical(out[name], want)
                status = "bit-exact" if good else "MISMATCH (expected bit-exact)"
            else:
                status = "ok" if good else "MISMATCH"
            ok &= good
            rows.append(f"{t:10} {name[:24]:24} {err:12.3e}  {status}")
    return rows, ok


def output_scales(ref: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The largest finite magnitude among the outputs of each float dtype.

    An output is held to 64 ulps of this, not only of its own values: the gradients of a
    training graph come from the same backward sums, and one that is 0 in exact arithmetic (a
    convolution's bias before a batch norm) holds rounding noise of the others' size, which
    another order of summation changes completely.
    """
    out: dict[str, float] = {}
    for a in ref.values():
        if a.dtype.kind == "f" and a.size:
            with np.errstate(invalid="ignore"):
                m = float(np.abs(a[np.isfinite(a)]).max(initial=0.0))
            out[a.dtype.str] = max(out.get(a.dtype.str, 0.0), m)
    return out


def uses_transcendental(g: Graph) -> bool:
    """Whether a node of ``g`` (or of a fused body) computes a transcendental function."""
    return any(get_op(n.op).transcendental if n.body is None else uses_transcendental(n.body)
               for n in g.nodes)


def to_float64(g: Graph) -> Graph:
    """A copy of ``g`` with every floating tensor in float64 (for finite differences)."""
    new = Graph(g.name)
    vmap: dict[Value, Value] = {}

    def f64(dtype):
        return "float64" if dtype.is_float else dtype

    for v in g.inputs:
        vmap[v] = new.input(v.name, f64(v.type.dtype), v.type.shape)
    for p in g.parameters:
        t64 = TensorType(f64(p.type.dtype), p.type.shape)
        value = None if p.value is None else p.value.astype(t64.dtype.numpy)
        vmap[p] = new.add_parameter(p.name, value, t64)
    for n in g.nodes:
        if n.body is not None:
            raise GradcError("check: fused nodes cannot be converted to float64")
        attrs = dict(n.attrs)
        if n.op == "constant" and attrs["value"].dtype.kind == "f":
            attrs["value"] = attrs["value"].astype(np.float64)
        if n.op == "cast" and attrs["dtype"].is_float:
            attrs["dtype"] = "float64"
        out = make_node(n.op, [vmap[x] for x in n.inputs], attrs, graph=new)
        outs = out if isinstance(out, tuple) else (out,)
        vmap.update(zip(n.outputs, outs))
    for v in g.outputs:
        new.output(vmap[v], v.name)
    return new


def finite_differences(g: Graph, shapes: Mapping[str, int], seed: int = 0,
                       points: int = 6, h: float = 1e-6) -> list[tuple[str, float, float]]:
    """(gradient output name, largest |analytic - numeric|, scale) per differentiated input
    and parameter; the difference is -1 for a value that no output's cotangent reaches (not
    compared: unused, or read only through operands that get no gradient by definition)."""
    g64 = to_float64(g)
    t = make_grad(g64, "all")
    names = grad_names(g64, "all")
    feeds = random_inputs(g64, dict(shapes), seed)
    values = {**{p.name: p.value for p in g64.parameters if p.value is not None}, **feeds}
    rng = np.random.default_rng(seed + 1)
    by_output = {v.name: v for v in g64.outputs}
    cot = {out: rng.standard_normal(
        [shapes.get(d, 2) if isinstance(d, str) else d for d in by_output[out].type.shape]
    ).astype(by_output[out].type.dtype.numpy) for out in names.cotangents}
    fwd = compile(g64, target="reference", passes=None)
    grads = compile(t, target="reference", passes=None)(
        **feeds, **{names.cotangents[out]: c for out, c in cot.items()})

    def loss(f: dict) -> float:
        out = fwd(**f)
        # an output near the float64 limit overflows here: a non-finite loss is skipped below
        with np.errstate(over="ignore", invalid="ignore"):
            return sum(float(np.sum(out[name].astype(np.float64) * c))
                       for name, c in cot.items())

    rows = []
    base = loss(values)
    seeded = _seeded_gradients(t, names.cotangents.values())
    for v, count in _fd_values(g64, points):
        x = values[v.name]
        if names.gradients[v.name] not in seeded:
            # no cotangent reaches this gradient: every path from the value to the outputs
            # passes an operand that gets no gradient by definition (adam_optimizer's, a
            # comparison's, max_pooling_grad's x), so a finite difference measures what the
            # gradient deliberately leaves out
            rows.append((names.gradients[v.name], -1.0, 0.0))
            continue
        analytic = grads[names.gradients[v.name]]
        worst = 0.0
        for _ in range(count):
            i = tuple(rng.integers(0, n) for n in x.shape)
            plus, minus = x.copy(), x.copy()
            plus[i] += h
            minus[i] -= h
            up, down = loss({**values, v.name: plus}), loss({**values, v.name: minus})
            if not (np.isfinite(base) and np.isfinite(up) and np.isfinite(down)):
                # Not finite around this point (sqrt of a negative input, an overflow): a
                # central difference says nothing about the derivative there.
                continue
            num = (up - down) / (2 * h)
            a = float(analytic[i])
            worst = max(worst, abs(num - a) if np.isfinite(a) else float("inf"))
        finite = analytic[np.isfinite(analytic)]
        rows.append((names.gradients[v.name], worst, float(np.abs(finite).max(initial=0.0))))
    return rows


def _seeded_gradients(t: Graph, cotangents: object) -> set[str]:
    """Names of ``t``'s outputs that depend on at least one of the cotangent inputs."""
    names = set(cotangents)  # type: ignore[call-overload]
    reached: set[int] = {id(v) for v in t.inputs if v.name in names}
    for n in t.nodes:  # in graph order: operands before users
        if any(id(v) in reached for v in n.inputs):
            reached.update(id(v) for v in n.outputs)
    return {v.name for v in t.outputs if id(v) in reached}


def _fd_values(g: Graph, points: int) -> list[tuple[Value, int]]:
    """The values finite differences visit and how many coordinates of each."""
    out = [(v, points) for v in g.inputs if v.type.dtype.is_float]
    params = [p for p in g.parameters if p.type.dtype.is_float]
    if len(params) > MAX_FD_PARAMETERS:
        step = len(params) / MAX_FD_PARAMETERS
        params = [params[int(k * step)] for k in range(MAX_FD_PARAMETERS)]
    return out + [(p, PARAMETER_POINTS) for p in params]


def run_check(g: Graph, grad: bool = False, shapes: Mapping[str, int] | None = None,
              seed: int = 0, targets: Sequence[str] | None = None) -> int:
    """Print the comparison tables; 0 when everything agrees, 1 otherwise."""
    shapes = dict(shapes or {})
    targets = list(targets or TARGETS)
    graphs = [("graph", g)] + ([("training graph", make_grad(g, "all"))] if grad else [])
    ok = True
    for title, gr in graphs:
        print(f"{title} {gr.name!r}: largest difference from the reference target")
        rows, good = compare_targets(gr, targets, shapes, seed)
        ok &= good
        print("\n".join("  " + r for r in rows))
    if grad:
        print("gradients vs central finite differences (float64)")
        for name, err, scale in finite_differences(g, shapes, seed):
            if err < 0:
                print(f"  {name:25} {'-':>20}  not compared (no output's gradient reaches "
                      "it: unused, or read only by an operand with no gradient by definition)")
                continue
            good = err <= 1e-5 * (1 + scale)
            ok &= good
            print(f"  {name:25} max |diff| {err:.3e}  {'ok' if good else 'MISMATCH'}")
    print("all targets agree" if ok else "DISAGREEMENT beyond tolerance")
    return 0 if ok else 1
