"""C kernels of SPEC-training.md §10: convolution (both directions) and its filter gradient.

Each kernel keeps the reference's canonical order, so results are bit-identical to it:

- forward: per (n, co) plane, an accumulator row per output plane; input channels of the group,
  then filter taps in row-major order, each tap adding one product to every output it reaches
  (the innermost loop runs along an output row: contiguous, vectorizable at stride 1);
- backward (transposed): the same, with the taps in reversed row-major order, each tap adding
  into a strided row of outputs (the terms of an output then come in input-position order);
- filter gradient: per (f0, f1) pair, per tap, one dot product over batch, then positions.

OpenMP splits the (n, co) planes, or the filter's (f0, f1) pairs, over the threads. A tap's
range of positions (``lo..hi``) on an axis, and the first position it reads, are computed at run
time from constants, in int64: the kernel is emitted only when every such number is bounded
(``_check_bounds``), else UnsupportedError (attributes near 2**62). No table sized by a tensor
dim is written into the source. These loops serve float16, thin groups (depthwise forward and
backward) and non-finite factors; float32/float64 layers otherwise take conv_gemm.py's
register-tiled products (same order, same bits), or, for small padded planes, conv_classes.py's
products per class of positions that read the same taps (no product of padding).
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Sequence

from gradc.errors import UnsupportedError
from gradc.backends.c import conv_classes, conv_gemm
from gradc.backends.c.kernel import Kernel, fail_unless
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.ctypes_map import CType, ctype
from gradc.backends.c.writer import CWriter

BOUND = 2 ** 62  # every index and tap-range number of a kernel stays below this


@dataclass
class _Axis:
    """One spatial axis of a tap loop: q runs over ``m`` positions of the iterated tensor and
    reads (or writes) position ``q*s - sp + k*d`` of the other tensor (``n`` positions)."""

    m: int
    n: int
    k: int
    s: int
    d: int
    sp: int

    def bounded(self) -> bool:
        """True when the run-time tap-range arithmetic of this axis fits int64 exactly."""
        return (self.k - 1) * self.d + self.sp + (self.m + 2) * self.s + self.n + 1 < BOUND


def _check_bounds(op: str, axes: Sequence[_Axis]) -> None:
    for i, a in enumerate(axes):
        if not a.bounded():
            raise UnsupportedError(
                f"c target: {op}: strides/dilations/padding: expected tap positions below "
                f"2**62 on spatial axis {i}, got filter {a.k}, dilation {a.d}, stride {a.s}, "
                f"start padding {a.sp} over {a.m} and {a.n} positions")


def _tap_range(cw: CWriter, i: int, a: _Axis, k: str) -> None:
    """``lo{i}..hi{i}``: the positions q whose tap ``k`` lands inside the other tensor;
    ``f{i}``: the other tensor's position at ``lo{i}`` (empty when ``lo > hi``)."""
    cw.line(f"const int64_t c{i} = {k} * {a.d} - {a.sp};",
            f"const int64_t lo{i} = c{i} >= 0 ? 0 : (-c{i} + {a.s - 1}) / {a.s};",
            f"int64_t hi{i} = {a.n - 1} - c{i} < 0 ? -1 : ({a.n - 1} - c{i}) / {a.s};",
            f"if (hi{i} > {a.m - 1}) hi{i} = {a.m - 1};",
            f"const int64_t f{i} = lo{i} * {a.s} + c{i};")


def _strides(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def _parallel(k: Kernel, count: str, work: int, allocs: list[tuple[str, str, int]],
              body: CWriter) -> None:
    """``#pragma omp parallel`` over ``p < count`` with per-thread buffers (name, type, count)."""
    cw = k.code
    cw.line("int fail = 0;", f"const int64_t P = {count};",
            f"#pragma omp parallel num_threads(nt) if((double)P * {min(work, 2 ** 53)} > "
            "GC_PAR_MIN)")
    with cw.block():
        for name, ty, n in allocs:
            cw.line(f"{ty} *{name} = ({ty} *)gc_alloc((size_t){n} * sizeof({ty}));")
        ok = " && ".join(f"{name} != NULL" for name, _, _ in allocs) or "1"
        cw.line(f"const int ok = {ok};")
        fail_unless(cw, "ok")
        cw.line("#pragma omp for schedule(static)")
        with cw.block("for (int64_t p = 0; p < P; p++)"):
            cw.line("if (!ok) continue;")
            cw.nest(body)
        cw.line(*(f"free({name});" for name, _, _ in allocs))
    cw.line("if (fail) return 1;")


def _filter_index(kshape: Sequence[int], flip: bool, names: Sequence[str]) -> str:
    """The flat in-filter offset of tap ``names`` (flipped on every axis for ``flip``)."""
    st = _strides(kshape)
    terms = [f"({kshape[i] - 1} - {v})" if flip else v for i, v in enumerate(names)]
    return " + ".join(f"{t} * {st[i]}" for i, t in enumerate(terms))


def _store(cw: CWriter, t: CType, y: str, bias: str | None, plane: int,
           relu: bool = False) -> None:
    """Round the accumulator plane into the output plane (after the bias, if any; then the
    relu epilogue, ``v > 0 ? v : +0``, for a float32/float64 result)."""
    b = f" + ({t.acc}){widen(t, bias)}" if bias else ""
    with cw.block(f"for (int64_t q = 0; q < {plane}; q++)"):
        if relu:
            cw.line(f"const {t.store} v = {narrow(t, f'acc[q]{b}')};",
                    f"{y}[q] = v > 0 ? v : ({t.store})0;")
        else:
            cw.line(f"{y}[q] = {narrow(t, f'acc[q]{b}')};")


def emit_convolution(k: Kernel) -> None:
    """convolution: per (n, co) plane, channels then taps, accumulated in a row buffer."""
    node = k.node
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    y = node.outputs[0]
    a = node.attrs
    fwd = a["direction"] == "forward"
    t = ctype(x.type.dtype)
    xs, ys, ks = ([int(v) for v in shape[2:]] for shape in (x.type.shape, y.type.shape,
                                                            w.type.shape))
    nd = len(xs)
    g = a["group_count"]
    ci, co = int(x.type.shape[1]), int(y.type.shape[1])
    cig, cog = ci // g, co // g
    if fwd:  # q: output positions; the other tensor: the input
        axes = [_Axis(ys[i], xs[i], ks[i], a["strides"][i], a["dilations"][i],
                      a["start_padding"][i]) for i in range(nd)]
    else:  # q: input positions; the other tensor: the output
        axes = [_Axis(xs[i], ys[i], ks[i], a["strides"][i], a["dilations"][i],
                      a["start_padding"][i]) for i in range(nd)]
    _check_bounds(node.op, axes)
    xp, wp, yp = k.param(x), k.param(w), k.param(y)
    bp = k.param(bias) if bias is not None else None
    oplane, iplane, kplane = math.prod(ys), math.prod(xs), math.prod(ks)
    if conv_gemm.usable(t, cog) and min(xs + ys + ks) > 0:
        fields = [(a["strides"][i], a["dilations"][i], a["start_padding"][i])
                  for i in range(nd)]
        flip = a["mode"] == "convolution"
        classes = conv_classes.plan(xs, ys, ks, fields, fwd)
        if classes is not None and conv_classes.worth(classes, xs, ys, ks, cog):
            # no product of padding: exact for non-finite filters too, no check needed
            conv_classes.emit(k, t, fwd, flip, g, (ci, co), (xs, ys, ks), classes,
                              bias is not None)
            return
        conv_gemm.finite_check(k.code, t, wp, k.dims.prod(w.type.shape))
        with k.code.block("if (!nonfinite)"):
            if (conv_gemm.implicit_ok(a["strides"], ys, ks, a["dilations"], False, forward=fwd,
                                      src=xs, pads=a["start_padding"],
                                      macs=cig * kplane * co * math.prod(ys))
                    and cig * kplane >= conv_gemm.MIN_K):
                conv_gemm.emit_convolution_implicit(k, t, fwd, flip, g, (ci, co), (xs, ys, ks),
                                                    fields, bias is not None)
            else:
                emit = conv_gemm.emit_convolution if fwd else conv_gemm.emit_convolution_backward
                emit(k, t, flip, g, (ci, co), (xs, ys, ks), fields, bias is not None)
            k.code.line("return 0;")
    body = CWriter()
    body.line(f"const int64_t n = p / {co}, o = p % {co}, grp = o / {cog};")
    if not fwd:
        body.line("const int64_t col = o % " + str(cog) + ";")
    body.line(f"for (int64_t q = 0; q < {oplane}; q++) acc[q] = 0;")
    with body.block(f"for (int64_t cl = 0; cl < {cig}; cl++)"):
        body.line(f"const {t.store} *xc = {xp} + (n * {ci} + grp * {cig} + cl) * {iplane};")
        if fwd:
            body.line(f"const {t.store} *wc = {wp} + (o * {cig} + cl) * {kplane};")
        else:
            body.line(f"const {t.store} *wc = {wp} + ((grp * {cig} + cl) * {cog} + col) * "
                      f"{kplane};")
        _tap_loops(body, t, axes, fwd, a["mode"] == "convolution", xs, ys, ks)
    _store(body, t, f"({yp} + p * {oplane})", f"{bp}[o]" if bp else None, oplane,
           relu=k.epilogue == "relu")
    n = k.dims.expr(x.type.shape[0])
    _parallel(k, f"{n} * {co}", cig * kplane * oplane, [("acc", t.acc, oplane)], body)


def _tap_loops(cw: CWriter, t: CType, axes: list[_Axis], fwd: bool, flip: bool,
               xs: list[int], ys: list[int], ks: list[int]) -> None:
    """The taps (row-major forward, reversed backward) and, per tap, its box of positions."""
    nd = len(axes)
    xst, yst = _strides(xs), _strides(ys)
    with ExitStack() as loops:
        for i, ax in enumerate(axes):
            loops.enter_context(cw.block(
                f"for (int64_t k{i} = 0; k{i} < {ax.k}; k{i}++)" if fwd else
                f"for (int64_t k{i} = {ax.k - 1}; k{i} >= 0; k{i}--)"))
            _tap_range(cw, i, ax, f"k{i}")
            cw.line(f"if (lo{i} > hi{i}) continue;")
        kidx = _filter_index(ks, flip, [f"k{i}" for i in range(nd)])
        cw.line(f"const {t.acc} wv = ({t.acc}){widen(t, f'wc[{kidx}]')};")
        # GCC 12 at -O3 vectorizes a tap loop itself (outer-loop vectorization) though two taps
        # add into the same outputs, and loses terms (fuzz seed 12012: a 3-D transposed
        # convolution of 1x1x2 taps summed 2 of 102 at -O3, right at -O2); an empty asm with a
        # memory clobber keeps every tap loop scalar, the box's loops below stay vectorizable
        cw.line("#if defined(__GNUC__)", "__asm__ volatile(\"\" ::: \"memory\");", "#endif")
        _box(cw, t, axes, fwd, xst, yst)


def _box(cw: CWriter, t: CType, axes: list[_Axis], fwd: bool, xst: list[int],
         yst: list[int]) -> None:
    """acc[out] += x[in] * wv over the tap's box (q runs over the first tensor's positions)."""
    nd = len(axes)
    heads = [f"for (int64_t q{i} = lo{i}; q{i} <= hi{i}; q{i}++)" for i in range(nd)]
    pos = [f"(f{i} + (q{i} - lo{i}) * {axes[i].s})" for i in range(nd)]
    qs = [f"q{i}" for i in range(nd)]
    if fwd:  # q: output positions, pos: input positions
        out = " + ".join(f"{v} * {yst[i]}" for i, v in enumerate(qs))
        inp = " + ".join(f"{v} * {xst[i]}" for i, v in enumerate(pos))
    else:
        out = " + ".join(f"{v} * {yst[i]}" for i, v in enumerate(pos))
        inp = " + ".join(f"{v} * {xst[i]}" for i, v in enumerate(qs))
    with cw.blocks(heads):
        cw.line(f"acc[{out}] += ({t.acc}){widen(t, f'xc[{inp}]')} * wv;")


def emit_convolution_filter_grad(k: Kernel) -> None:
    """convolution_filter_grad: per filter element, a dot product over batch, then positions."""
    node = k.node
    x, dy = node.inputs
    dw = node.outputs[0]
    a = node.attrs
    fwd = a["direction"] == "forward"
    t = ctype(x.type.dtype)
    it, other = (dy, x) if fwd else (x, dy)
    ms, ns = ([int(v) for v in v_.type.shape[2:]] for v_ in (it, other))
    ws = [int(v) for v in dw.type.shape]
    ks = ws[2:]
    nd = len(ks)
    g = a["group_count"]
    f0n, f1n = ws[0], ws[1]
    ca = f0n // g
    c_it, c_ot = int(it.type.shape[1]), int(other.type.shape[1])
    axes = [_Axis(ms[i], ns[i], ks[i], a["strides"][i], a["dilations"][i],
                  a["start_padding"][i]) for i in range(nd)]
    _check_bounds(node.op, axes)
    mst, nst = _strides(ms), _strides(ns)
    mplane, nplane, kplane = math.prod(ms), math.prod(ns), math.prod(ks)
    itp, otp, wp = k.param(it), k.param(other), k.param(dw)
    batch = k.dims.expr(x.type.shape[0])
    if (conv_gemm.depthwise_ok(t, ca, nd) and min(ms + ns + ks) > 0
            and math.prod(ks) <= conv_gemm.DEPTHWISE_TAPS):
        conv_gemm.finite_check(k.code, t, itp, k.dims.prod(it.type.shape))
        with k.code.block("if (!nonfinite)"):
            conv_gemm.emit_filter_grad_depthwise(
                k, t, a["mode"] == "convolution", g, itp, otp, (c_it, c_ot), (ms, ns, ks),
                [(a["strides"][i], a["dilations"][i], a["start_padding"][i]) for i in range(nd)],
                f1n)
            k.code.line("return 0;")
    if conv_gemm.usable(t, ca) and min(ms + ns + ks) > 0:
        conv_gemm.finite_check(k.code, t, itp, k.dims.prod(it.type.shape))
        with k.code.block("if (!nonfinite)"):
            emit = (conv_gemm.emit_filter_grad_implicit
                    if conv_gemm.implicit_ok(a["strides"], ms, ks, a["dilations"], True, ca)
                    else conv_gemm.emit_filter_grad)
            emit(k, t, a["mode"] == "convolution", g, itp, otp, (c_it, c_ot), (ms, ns, ks),
                 [(a["strides"][i], a["dilations"][i], a["start_padding"][i]) for i in range(nd)],
                 f1n)
            k.code.line("return 0;")
    body = CWriter()
    body.line(f"const int64_t fc = p / {f1n}, oc = (fc / {ca}) * {f1n} + p % {f1n};")
    heads = [f"for (int64_t k{i} = 0; k{i} < {ks[i]}; k{i}++)" for i in range(nd)]
    with body.blocks(heads):
        body.line(f"{t.acc} acc = 0;")
        with body.block():
            for i, ax in enumerate(axes):
                _tap_range(body, i, ax, f"k{i}")
            empty = " || ".join(f"lo{i} > hi{i}" for i in range(nd))
            with body.block(f"if (!({empty}))"):
                _dot(body, t, axes, itp, otp, batch, (c_it, c_ot), (mplane, nplane),
                     (mst, nst))
        kidx = _filter_index(ks, a["mode"] == "convolution", [f"k{i}" for i in range(nd)])
        body.line(f"{wp}[p * {kplane} + {kidx}] = {narrow(t, 'acc')};")
    work = kplane * mplane
    _parallel(k, str(f0n * f1n), work, [], body)


def _dot(cw: CWriter, t: CType, axes: list[_Axis], itp: str, otp: str, batch: str,
         chans: tuple[int, int], planes: tuple[int, int], st: tuple[Any, Any]) -> None:
    """acc += it[n, fc, q] * other[n, oc, pos(q)] over n, then the tap's box of q."""
    nd = len(axes)
    mst, nst = st
    with cw.block(f"for (int64_t n = 0; n < {batch}; n++)"):
        cw.line(f"const {t.store} *ip = {itp} + (n * {chans[0]} + fc) * {planes[0]};",
                f"const {t.store} *op = {otp} + (n * {chans[1]} + oc) * {planes[1]};")
        heads = [f"for (int64_t q{i} = lo{i}; q{i} <= hi{i}; q{i}++)" for i in range(nd)]
        qi = " + ".join(f"q{i} * {mst[i]}" for i in range(nd))
        pi = " + ".join(f"(f{i} + (q{i} - lo{i}) * {axes[i].s}) * {nst[i]}" for i in range(nd))
        with cw.blocks(heads):
            cw.line(f"acc += ({t.acc}){widen(t, f'ip[{qi}]')} * "
                    f"({t.acc}){widen(t, f'op[{pi}]')};")


EMITTERS: dict[str, Any] = {
    "convolution": emit_convolution,
    "convolution_filter_grad": emit_convolution_filter_grad,
}
