"""float64 ``erf``, ``erfc``, ``sin`` and ``cos`` written with standard ONNX operators.

onnxruntime 1.32 has no double ``Erf`` kernel (nor ``Gelu``, whose function body calls it), and
its double ``Sin``/``Cos`` lose the reduced argument below |x| = 15: near the zeros at pi .. 4 pi
the result is off by up to 2**52 ulps (``sin(pi)`` comes out 0), though within 3 ulps elsewhere.
gradc's float64 lowerings therefore write these functions out, branch-free (every piece is
computed and ``Where`` picks one per element):

- ``erf64``/``erfc64``: the algorithm of the C library that the reference's ``math.erf`` calls
  (glibc 2.36's ``s_erf.c``: fdlibm with glibc's polynomial evaluation order, its constants and
  thresholds; ``SET_LOW_WORD(z, 0)`` is ``floor(x * 2**k) / 2**k``). Only ``exp`` comes from
  onnxruntime, so the results match the reference to the last bit wherever its double ``Exp``
  does (measured: within 1 ulp, almost always equal).
- ``sin64``/``cos64``: for |x| < 2**19, Cody-Waite reduction by fdlibm's three 33-bit pieces of
  pi/2 and its tail, the two roundings kept exactly (TwoSum) as a double-double ``y0 + y1``, then
  FreeBSD msun's ``__kernel_sin``/``__kernel_cos`` (below 1 ulp) and the quadrant; from 2**19 on
  (where onnxruntime's reduction is exact, measured within 3 ulps) onnxruntime's ``Sin``/``Cos``.
  ``sin(-0) = -0``.
"""

from __future__ import annotations

import struct

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor, broadcast
from gradc.ir.types import DType

F64 = DType.float64
Num = Tensor | float


def _hw(high: int) -> float:
    """The double whose high word is ``high`` and low word 0 (fdlibm's thresholds)."""
    return struct.unpack(">d", struct.pack(">Q", high << 32))[0]


# glibc 2.36 sysdeps/ieee754/dbl-64/s_erf.c
ERX = 8.45062911510467529297e-01
EFX = 1.28379167095512586316e-01
PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
      -5.77027029648944159157e-03, -2.37630166566501626084e-05)
QQ = (0.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
      1.32494738004321644526e-04, -3.96022827877536812320e-06)
PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
      3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
      -2.16637559486879084300e-03)
QA = (0.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
      1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
      -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
      -8.12874355063065934246e+01, -9.81432934416914548592e+00)
SA = (0.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
      6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
      6.57024977031928170135e+00, -6.04244152148580987438e-02)
RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
      -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
      -4.83519191608651397019e+02)
SB = (0.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
      3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
      -2.24409524465858183362e+01)

# fdlibm e_rem_pio2.c and FreeBSD msun k_sin.c / k_cos.c
INVPIO2 = 6.36619772367581382433e-01
PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21,
        8.47842766036889956997e-32)  # pio2_1, pio2_2, pio2_3 (33 bits each), pio2_3t
S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
     2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
     -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
REDUCED_BELOW = 2.0 ** 19  # fn < 2**20: fn * pio2_k is exact


class _Ops:
    """float64 arithmetic on ONNX tensors in the order written; a float is a scalar constant."""

    def __init__(self, gb: OnnxGraphBuilder) -> None:
        self.gb = gb

    def t(self, v: Num) -> Tensor:
        return v if isinstance(v, Tensor) else self.gb.scalar(float(v), F64)

    def _bin(self, op: str, a: Num, b: Num) -> Tensor:
        ta, tb = self.t(a), self.t(b)
        return self.gb.op(op, [ta, tb], F64, broadcast(ta.shape, tb.shape))

    def add(self, a: Num, b: Num) -> Tensor:
        return self._bin("Add", a, b)

    def sub(self, a: Num, b: Num) -> Tensor:
        return self._bin("Sub", a, b)

    def mul(self, a: Num, b: Num) -> Tensor:
        return self._bin("Mul", a, b)

    def div(self, a: Num, b: Num) -> Tensor:
        return self._bin("Div", a, b)

    def fn(self, op: str, a: Tensor) -> Tensor:
        return self.gb.op(op, [a], F64, a.shape)

    def less(self, a: Num, b: Num) -> Tensor:
        return self.gb.compare("Less", self.t(a), self.t(b))

    def where(self, c: Tensor, a: Num, b: Num) -> Tensor:
        """``a`` where ``c`` else ``b``; ``a`` must never be -0.0 where ``c`` holds (onnxruntime's
        Where turns a -0.0 of its first branch into +0.0; ``gb.select`` handles the rest)."""
        ta, tb = self.t(a), self.t(b)
        return self.gb.op("Where", [c, ta, tb], F64, broadcast(c.shape, ta.shape, tb.shape))

    def lin(self, c0: float, c1: float, s: Tensor) -> Tensor:
        """``c0 + s * c1`` (glibc's ``pp[0] + z * pp[1]``)."""
        return self.add(c0, self.mul(s, c1))


def _erf_small(o: _Ops, x: Tensor) -> Tensor:
    """y = r / s of |x| < 0.84375 (both functions), on z = x * x."""
    z = o.mul(x, x)
    r1, z2 = o.lin(PP[0], PP[1], z), o.mul(z, z)
    r2, z4 = o.lin(PP[2], PP[3], z), o.mul(z2, z2)
    s1, s2, s3 = o.lin(1.0, QQ[1], z), o.lin(QQ[2], QQ[3], z), o.lin(QQ[4], QQ[5], z)
    r = o.add(o.add(r1, o.mul(z2, r2)), o.mul(z4, PP[4]))
    s = o.add(o.add(s1, o.mul(z2, s2)), o.mul(z4, s3))
    return o.div(r, s)


def _erf_mid(o: _Ops, ax: Tensor) -> Tensor:
    """P / Q of 0.84375 <= |x| < 1.25, on s = |x| - 1."""
    s = o.sub(ax, 1.0)
    p1, s2 = o.lin(PA[0], PA[1], s), o.mul(s, s)
    q1, s4 = o.lin(1.0, QA[1], s), o.mul(s2, s2)
    p2, s6 = o.lin(PA[2], PA[3], s), o.mul(s4, s2)
    q2, p3, q3 = o.lin(QA[2], QA[3], s), o.lin(PA[4], PA[5], s), o.lin(QA[4], QA[5], s)
    p = o.add(o.add(o.add(p1, o.mul(s2, p2)), o.mul(s4, p3)), o.mul(s6, PA[6]))
    q = o.add(o.add(o.add(q1, o.mul(s2, q2)), o.mul(s4, q3)), o.mul(s6, QA[6]))
    return o.div(p, q)


def _erfc_tail(o: _Ops, ax: Tensor, split: float) -> Tensor:
    """exp(-z*z - 0.5625) * exp((z - |x|)(z + |x|) + R/S) / |x| for 1.25 <= |x| < 28, with R/S
    from the (ra, sa) fit below ``split`` (about 1/0.35) and (rb, sb) above."""
    s = o.div(1.0, o.mul(ax, ax))
    s2 = o.mul(s, s)
    s4 = o.mul(s2, s2)
    s6, s8 = o.mul(s4, s2), o.mul(s4, s4)
    ra = [o.lin(RA[k], RA[k + 1], s) for k in (0, 2, 4, 6)]
    sa = [o.lin(1.0, SA[1], s)] + [o.lin(SA[k], SA[k + 1], s) for k in (2, 4, 6)]
    r_a = o.add(o.add(o.add(ra[0], o.mul(s2, ra[1])), o.mul(s4, ra[2])), o.mul(s6, ra[3]))
    s_a = o.add(o.add(o.add(o.add(sa[0], o.mul(s2, sa[1])), o.mul(s4, sa[2])),
                      o.mul(s6, sa[3])), o.mul(s8, SA[8]))
    rb = [o.lin(RB[k], RB[k + 1], s) for k in (0, 2, 4)]
    sb = [o.lin(1.0, SB[1], s)] + [o.lin(SB[k], SB[k + 1], s) for k in (2, 4, 6)]
    r_b = o.add(o.add(o.add(rb[0], o.mul(s2, rb[1])), o.mul(s4, rb[2])), o.mul(s6, RB[6]))
    s_b = o.add(o.add(o.add(sb[0], o.mul(s2, sb[1])), o.mul(s4, sb[2])), o.mul(s6, sb[3]))
    low = o.less(ax, split)
    ratio = o.where(low, o.div(r_a, s_a), o.div(r_b, s_b))
    # z = |x| with the low 32 bits cleared: 20 fraction bits kept, by the binade of |x|
    scale = o.where(o.less(ax, 2.0), 2.0 ** 20, o.where(o.less(ax, 4.0), 2.0 ** 19, o.where(
        o.less(ax, 8.0), 2.0 ** 18, o.where(o.less(ax, 16.0), 2.0 ** 17, 2.0 ** 16))))
    z = o.div(o.fn("Floor", o.mul(ax, scale)), scale)
    e1 = o.fn("Exp", o.sub(o.mul(o.fn("Neg", z), z), 0.5625))
    e2 = o.fn("Exp", o.add(o.mul(o.sub(z, ax), o.add(z, ax)), ratio))
    return o.div(o.mul(e1, e2), ax)


def erf64(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """glibc's ``erf`` of a float64 tensor (-0 stays -0, NaN stays NaN, +-inf gives +-1)."""
    o = _Ops(gb)
    ax = o.fn("Abs", x)
    tiny = o.where(o.less(ax, _hw(0x00800000)),
                   o.mul(0.0625, o.add(o.mul(16.0, x), o.mul(16.0 * EFX, x))),
                   o.add(x, o.mul(EFX, x)))
    # below: -0.0 only at x = -0, which the last select takes from x itself
    small = o.where(o.less(ax, _hw(0x3e300000)), tiny, o.add(x, o.mul(x, _erf_small(o, x))))
    mid = o.add(ERX, _erf_mid(o, ax))
    tail = o.sub(1.0, _erfc_tail(o, ax, _hw(0x4006DB6E)))
    pos = o.where(o.less(ax, 1.25), mid, o.where(o.less(ax, 6.0), tail, 1.0))  # 1 - tiny is 1
    big = o.where(o.less(x, 0.0), o.fn("Neg", pos), pos)  # erf is odd
    out = o.where(o.less(ax, 0.84375), small, big)
    keep = gb.binary("Or", gb.op("IsNaN", [x], DType.bool, x.shape),
                     gb.compare("Equal", x, o.t(0.0)), DType.bool)
    return gb.select(keep, x, out, b_neg0=False)  # erf(+-0) = +-0, erf(NaN) = NaN


def erfc64(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """glibc's ``erfc`` of a float64 tensor (erfc(+inf) = 0, erfc(-inf) = 2, NaN stays NaN)."""
    o = _Ops(gb)
    ax = o.fn("Abs", x)
    xy = o.mul(x, _erf_small(o, x))
    small = o.where(o.less(x, 0.25), o.sub(1.0, o.add(x, xy)),
                    o.sub(0.5, o.add(xy, o.sub(x, 0.5))))
    small = o.where(o.less(ax, _hw(0x3c700000)), o.sub(1.0, x), small)
    pq = _erf_mid(o, ax)
    mid = o.where(o.less(x, 0.0), o.add(1.0, o.add(ERX, pq)), o.sub(1.0 - ERX, pq))
    r = _erfc_tail(o, ax, _hw(0x4006DB6D))
    tail = o.where(o.less(x, 0.0), o.where(o.less(x, -6.0), 2.0, o.sub(2.0, r)), r)
    far = o.where(o.less(x, 0.0), 2.0, 0.0)  # tiny * tiny and 2 - tiny
    out = o.where(o.less(ax, 0.84375), small, o.where(o.less(ax, 1.25), mid,
                                                       o.where(o.less(ax, 28.0), tail, far)))
    return o.where(gb.op("IsNaN", [x], DType.bool, x.shape), x, out)


def _two_sum(o: _Ops, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth's TwoSum)."""
    s = o.add(a, b)
    bb = o.sub(s, a)
    return s, o.add(o.sub(a, o.sub(s, bb)), o.sub(b, bb))


def _reduce(o: _Ops, t: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(fn, y0, y1): t - fn * pi/2 = y0 + y1 for 0 <= t < 2**19, fn = floor(t * 2/pi + 1/2)."""
    fn = o.fn("Floor", o.add(o.mul(t, INVPIO2), 0.5))
    r1 = o.sub(t, o.mul(fn, PIO2[0]))  # exact: fn * pio2_1 is exact and close to t
    h, e1 = _two_sum(o, r1, o.fn("Neg", o.mul(fn, PIO2[1])))
    h2, e2 = _two_sum(o, h, o.fn("Neg", o.mul(fn, PIO2[2])))
    low = o.sub(o.add(e1, e2), o.mul(fn, PIO2[3]))
    y0 = o.add(h2, low)
    return fn, y0, o.sub(low, o.sub(y0, h2))


def _kernel_sin(o: _Ops, x: Tensor, y: Tensor) -> Tensor:
    z = o.mul(x, x)
    w = o.mul(z, z)
    r = o.add(o.add(S[1], o.mul(z, o.lin(S[2], S[3], z))), o.mul(o.mul(z, w),
                                                                 o.lin(S[4], S[5], z)))
    v = o.mul(z, x)
    inner = o.sub(o.mul(z, o.sub(o.mul(0.5, y), o.mul(v, r))), y)
    return o.sub(x, o.sub(inner, o.mul(v, S[0])))


def _kernel_cos(o: _Ops, x: Tensor, y: Tensor) -> Tensor:
    z = o.mul(x, x)
    w = o.mul(z, z)
    r = o.add(o.mul(z, o.add(C[0], o.mul(z, o.lin(C[1], C[2], z)))),
              o.mul(o.mul(w, w), o.add(C[3], o.mul(z, o.lin(C[4], C[5], z)))))
    hz = o.mul(0.5, z)
    w1 = o.sub(1.0, hz)
    return o.add(w1, o.add(o.sub(o.sub(1.0, w1), hz), o.sub(o.mul(z, r), o.mul(x, y))))


def _sin_cos(gb: OnnxGraphBuilder, x: Tensor, want_sin: bool) -> Tensor:
    o = _Ops(gb)
    t = o.fn("Abs", x)
    fn, y0, y1 = _reduce(o, o.where(o.less(t, REDUCED_BELOW), t, 0.0))
    ks, kc = _kernel_sin(o, y0, y1), _kernel_cos(o, y0, y1)
    q = gb.op("Mod", [fn, o.t(4.0)], F64, fn.shape, fmod=1)
    odd = gb.compare("Equal", gb.op("Mod", [fn, o.t(2.0)], F64, fn.shape, fmod=1), o.t(1.0))
    if want_sin:  # sin(t): ks, kc, -ks, -kc by quadrant, then sin(x) = sign(x) sin(|x|)
        base, flip = o.where(odd, kc, ks), o.less(1.5, q)
    else:  # cos(t) = cos(x): kc, -ks, -kc, ks
        base = o.where(odd, ks, kc)
        flip = gb.binary("And", o.less(0.5, q), o.less(q, 2.5), DType.bool)
    v = o.where(flip, o.fn("Neg", base), base)  # base is 0 only at t = 0 (never flipped)
    if want_sin:
        v = o.where(o.less(x, 0.0), o.fn("Neg", v), v)
    v = o.where(o.less(t, REDUCED_BELOW), v, o.fn("Sin" if want_sin else "Cos", x))
    if not want_sin:
        return v
    return gb.select(gb.compare("Equal", x, o.t(0.0)), x, v, b_neg0=False)  # sin(-0) = -0


def sin64(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """sin of a float64 tensor within 1 ulp below 2**19, onnxruntime's Sin above."""
    return _sin_cos(gb, x, True)


def cos64(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """cos of a float64 tensor within 1 ulp below 2**19, onnxruntime's Cos above."""
    return _sin_cos(gb, x, False)
