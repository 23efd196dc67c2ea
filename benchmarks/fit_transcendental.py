"""Derives the constants of ``backends/c/transcend.h`` (the C target's vectorized exp, log, tanh,
erf/erfc, sin/cos) in 60-digit arithmetic, and prints them as the header's C block.

    python benchmarks/fit_transcendental.py            # print the block
    python benchmarks/fit_transcendental.py --write    # replace it in transcend.h

Needs mpmath (a dependency of sympy, which torch installs). Polynomials are Chebyshev fits
(``mpmath.chebyfit``: near-minimax); the rational approximation of erfcx(a) = exp(a^2) erfc(a)
on [0, 27.5] is a Sanathanan-Koerner iteration (weighted linear least squares for relative
error, at Chebyshev nodes). Each fit's error in the function it serves is printed to stderr;
every one is below 2^-53 relative, so each evaluation's error in double is dominated by its own
roundings (measured by benchmarks/bench_transcendental.py). The constants are the doubles nearest
the fitted values, written as C99 hexadecimal literals (exact).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable

import mpmath as mp

mp.mp.dps = 60
HEADER = Path(__file__).resolve().parents[1] / "backends" / "c" / "transcend.h"
BEGIN, END = "/* -- fitted constants (benchmarks/fit_transcendental.py) -- */", "/* -- end -- */"
TINY = mp.mpf("1e-25")


def hexf(v: mp.mpf) -> str:
    """The C99 hexadecimal literal of the double nearest ``v``."""
    return float(v).hex()


def horner(name: str, coeffs: list[mp.mpf]) -> str:
    """``#define name(x)``: the polynomial sum c[k] x^k in Horner's form (GC_FMA steps)."""
    body = hexf(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        body = f"GC_FMA(x, {body}, {hexf(c)})"
    return f"#define {name}(x) ({body})"


def cheb(name: str, f: Callable[[mp.mpf], mp.mpf], lo: float, hi: float, degree: int,
         scale: float) -> list[mp.mpf]:
    """Chebyshev fit of degree ``degree``; ``scale`` bounds the factor by which an error in
    the polynomial reaches the function's relative error (printed)."""
    c, err = mp.chebyfit(f, [lo, hi], degree + 1, error=True)
    rel = err * scale
    print(f"{name}: degree {degree}, relative error <= {mp.nstr(rel, 3)} "
          f"(2^{mp.nstr(mp.log(rel, 2), 4)})", file=sys.stderr)
    return [mp.mpf(x) for x in c[::-1]]


def q_exp(r: mp.mpf) -> mp.mpf:
    """(e^r - 1 - r) / r^2."""
    if abs(r) < TINY:
        return mp.mpf(1) / 2 + r / 6
    return (mp.exp(r) - 1 - r) / (r * r)


def r_log(z: mp.mpf) -> mp.mpf:
    """(2 atanh(s)/s - 2) / z with z = s^2: log(1+f) = 2s + s z R(z), s = f/(2+f)."""
    if z < TINY:
        return mp.mpf(2) / 3 + 2 * z / 5
    s = mp.sqrt(z)
    return (2 * mp.atanh(s) / s - 2) / z


def r_tanh(z: mp.mpf) -> mp.mpf:
    """(tanh(x)/x - 1) / z with z = x^2."""
    if z < TINY:
        return -mp.mpf(1) / 3 + 2 * z / 15
    x = mp.sqrt(z)
    return (mp.tanh(x) / x - 1) / z


def e_erf(u: mp.mpf) -> mp.mpf:
    """erf(a)/a with u = a^2."""
    if u < TINY:
        return 2 / mp.sqrt(mp.pi) * (1 - u / 3)
    a = mp.sqrt(u)
    return mp.erf(a) / a


def s_sin(z: mp.mpf) -> mp.mpf:
    """(sin x - x) / x^3 with z = x^2."""
    if z < TINY:
        return -mp.mpf(1) / 6 + z / 120
    x = mp.sqrt(z)
    return (mp.sin(x) - x) / x ** 3


def c_cos(z: mp.mpf) -> mp.mpf:
    """(cos x - 1 + z/2) / z^2 with z = x^2."""
    if z < TINY:
        return mp.mpf(1) / 24 - z / 720
    x = mp.sqrt(z)
    return (mp.cos(x) - 1 + z / 2) / (z * z)


def erfcx(a: mp.mpf) -> mp.mpf:
    return mp.erfc(a) * mp.exp(a * a)


def rational(n: int, m: int, hi: float, iters: int = 12) -> tuple[list[mp.mpf], list[mp.mpf]]:
    """N/D (degrees n, m; D(0) = 1) fitting erfcx on [0, hi] in relative error."""
    k = 6 * (n + m)
    xs = [hi / 2 + hi / 2 * mp.cos(mp.pi * (2 * i + 1) / (2 * k)) for i in range(k)]
    gs = [erfcx(x) for x in xs]
    dprev = [mp.mpf(1)] * k
    nc: list[mp.mpf] = []
    dc: list[mp.mpf] = []
    for _ in range(iters):
        rows, rhs = [], []
        for x, g, dp in zip(xs, gs, dprev):
            w = 1 / (g * dp)
            rows.append([w * x ** j for j in range(n + 1)] + [-w * g * x ** j
                                                              for j in range(1, m + 1)])
            rhs.append(w * g)
        sol, _ = mp.qr_solve(mp.matrix(rows), mp.matrix(rhs))
        nc = [sol[j] for j in range(n + 1)]
        dc = [mp.mpf(1)] + [sol[n + 1 + j] for j in range(m)]
        dprev = [mp.polyval(dc[::-1], x) for x in xs]
    nd = [mp.mpf(float(c)) for c in nc]
    dd = [mp.mpf(float(c)) for c in dc]
    worst = max(abs(mp.polyval(nd[::-1], x) / mp.polyval(dd[::-1], x) / erfcx(x) - 1)
                for x in (hi * mp.mpf(i) / 3000 for i in range(3001)))
    assert all(c > 0 for c in nc + dc), "expected positive coefficients (no cancellation)"
    print(f"erfcx: degrees {n}/{m} on [0, {hi}], relative error with double coefficients "
          f"<= {mp.nstr(worst, 3)} (2^{mp.nstr(mp.log(worst, 2), 4)})", file=sys.stderr)
    return nc, dc


def split(v: mp.mpf, bits: int) -> tuple[mp.mpf, mp.mpf]:
    """``v`` = hi + rest, hi holding the leading ``bits`` bits of v (truncated)."""
    e = mp.floor(mp.log(abs(v), 2))
    q = mp.mpf(2) ** (bits - 1 - e)
    hi = mp.floor(v * q) / q
    return hi, v - hi


def two_over_pi_words(count: int, zeros: int) -> list[int]:
    """The bits of 2/pi after the binary point in 32-bit words, after ``zeros`` zero words."""
    with mp.workdps(32 * count):  # every bit of the table, and a margin
        v = int(mp.floor(2 / mp.pi * mp.mpf(2) ** (32 * (count - zeros))))
    words = [(v >> (32 * (count - zeros - 1 - j))) & 0xFFFFFFFF for j in range(count - zeros)]
    return [0] * zeros + words


def block() -> str:
    lines = [BEGIN]
    ln2 = mp.log(2)
    ln2_hi, rest = split(ln2, 32)
    lines += [f"#define GC_LN2_HI {hexf(ln2_hi)}  /* ln 2: 32 bits, k * GC_LN2_HI exact */",
              f"#define GC_LN2_LO {hexf(rest)}",
              f"#define GC_INV_LN2 {hexf(1 / ln2)}"]
    lines.append(horner("GC_EXP_Q", cheb("exp", q_exp, -0.35, 0.35, 9, 0.35 ** 2)))
    lines.append(horner("GC_LOG_R", cheb("log", r_log, 0, 0.1716 ** 2, 6, 0.1716 ** 2 / 2)))
    lines.append(horner("GC_TANH_R", cheb("tanh", r_tanh, 0, 0.625 ** 2, 11, 0.625 ** 2)))
    lines.append(horner("GC_ERF_E", cheb("erf", e_erf, 0, 1, 11, 1 / 1.1)))
    q4 = (mp.pi / 4) ** 2 * mp.mpf("1.0001")
    sc = cheb("sin", s_sin, 0, q4, 5, q4)  # fdlibm's S1 apart from S2 + z (S3 + ...)
    lines += [f"#define GC_SIN_S1 {hexf(sc[0])}", horner("GC_SIN_R", sc[1:])]
    lines.append(horner("GC_COS_C", cheb("cos", c_cos, 0, q4, 5, q4 ** 2)))
    nc, dc = rational(10, 11, 27.5)
    lines += [horner("GC_ERFCX_N", nc), horner("GC_ERFCX_D", dc)]
    p1, r1 = split(mp.pi / 2, 33)
    p2, r2 = split(r1, 33)
    p3, r3 = split(r2, 33)
    lines += ["/* pi/2 in three 33-bit parts and their tails: n * part is exact for n < 2^20 */",
              f"#define GC_PIO2_1 {hexf(p1)}", f"#define GC_PIO2_1T {hexf(r1)}",
              f"#define GC_PIO2_2 {hexf(p2)}", f"#define GC_PIO2_2T {hexf(r2)}",
              f"#define GC_PIO2_3 {hexf(p3)}", f"#define GC_PIO2_3T {hexf(r3)}",
              f"#define GC_INV_PIO2 {hexf(2 / mp.pi)}"]
    h = mp.mpf(float(mp.pi / 2))
    lines += [f"#define GC_PIO2_H {hexf(h)}  /* pi/2 = H + L */",
              f"#define GC_PIO2_L {hexf(mp.pi / 2 - h)}"]
    words = two_over_pi_words(40, 2)
    rows = [", ".join(f"0x{w:08x}u" for w in words[i:i + 6]) for i in range(0, len(words), 6)]
    lines.append("/* 2/pi after the binary point, 32 bits a word, after two zero words */")
    lines.append("static const uint32_t gc_2opi[40] = {\n    " + ",\n    ".join(rows) + "};")
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the block in transcend.h")
    args = ap.parse_args()
    text = block()
    if not args.write:
        print(text)
        return
    old = HEADER.read_text()
    pattern = re.escape(BEGIN) + ".*?" + re.escape(END)
    HEADER.write_text(re.sub(pattern, lambda _: text, old, count=1, flags=re.S))


if __name__ == "__main__":
    main()
