"""The C target's register-blocked gemm (backends/c/gemm.py) against the reference, bit for bit.

The kernel tiles the result in MR x NR micro-tiles (MR = 8 rows; NR = 32 float32/float16 or 16
float64 columns), chunks of MC = 128 rows and k blocks of KC = 256, and packs ``op(b)``; only the
loop structure changes, never §11.1's per-element operation sequence, so every output must equal
the "reference" target's BIT FOR BIT (NaN payloads aside: SPEC.md §1.6). The shapes are chosen
around those block sizes (1, primes, MR/NR/MC/KC +- 1), with all four transpose combinations,
batch broadcasting, alpha/beta with and without ``c`` and every broadcast form of ``c``.
Several gemms share one graph so each dtype costs a single C compile.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c import gemm as gemm_module
from helpers import assert_bits

# (M, N, K): edges of MR = 8, NR = 16/32, MC = 128, KC = 256, plus 1s and primes. The last four
# are for the prelude's gc_gemm (``tables``): A packed into 16-row strips once at 8 panels of
# NR = 16 (float32) or 8 (float64) columns and more (GC_PACK_MIN), read in place below, 8-row
# tiles then; rows past a strip, k blocks of 256 and chunks of 256 rows around their edges; and
# A in place at 4x B's size, whose jobs take every panel of a row chunk. A transposed (every
# other shape) has consecutive rows: in place, tiles of 16 read through one pointer (the last
# shape: 2-D, two full tiles and a part).
SHAPES = [(1, 1, 1), (1, 33, 7), (7, 1, 13), (8, 32, 256), (9, 31, 257), (17, 17, 3),
          (16, 16, 1), (13, 65, 29), (129, 33, 2), (3, 97, 513), (31, 47, 11), (2, 129, 255),
          (17, 128, 300), (300, 129, 513), (33, 112, 260), (16, 127, 1), (300, 40, 300),
          (33, 16, 40), (16, 48, 17), (48, 20, 300), (31, 64, 9), (40, 50, 70)]


def _cases(rng: np.random.Generator, dtype: type) -> list[tuple]:
    """Random (a, b, c, fields) per shape: transposes cycle, batch and c broadcast at random."""
    cases = []
    for i, (m, n, k) in enumerate(SHAPES):
        ta, tb = bool(i & 1), bool(i & 2)
        rank = 2 + i % 3
        batch = [int(v) for v in rng.integers(1, 4, rank - 2)]
        ab = [d if rng.random() < 0.6 else 1 for d in batch]
        bb = [d if (rng.random() < 0.6 or x == 1) else 1 for d, x in zip(batch, ab)]
        a = rng.standard_normal(ab + ([k, m] if ta else [m, k])).astype(dtype)
        b = rng.standard_normal(bb + ([n, k] if tb else [k, n])).astype(dtype)
        if i == 5:  # -0 products: acc starts from +0, so +0 + -0 must give +0 (not -0)
            a[...] = -0.0
        if i == 6:  # an inf makes inf - inf = NaN in some elements; the rest must still match
            a.flat[0] = np.inf
        out = [max(x, y) for x, y in zip(ab, bb)] + [m, n]
        c = None
        if i % 4 != 3:
            cshape = [d if rng.random() < 0.5 else 1 for d in out]
            c = rng.standard_normal(cshape).astype(dtype)
        f = dict(trans_a=ta, trans_b=tb, alpha=float(rng.choice([1.0, 0.5, -1.25, 0.1])),
                 beta=float(rng.choice([1.0, 0.0, 2.0, -0.75])))
        cases.append((a, b, c, f))
    return cases


def _run(target: str, cases: list[tuple]) -> dict[str, np.ndarray]:
    g = gradc.Graph("gemms")
    feeds = {}
    for i, (a, b, c, f) in enumerate(cases):
        av = g.input(f"a{i}", a.dtype.name, a.shape)
        bv = g.input(f"b{i}", b.dtype.name, b.shape)
        feeds[f"a{i}"], feeds[f"b{i}"] = a, b
        cv = None
        if c is not None:
            cv = g.input(f"c{i}", c.dtype.name, c.shape)
            feeds[f"c{i}"] = c
        g.output(ops.gemm(av, bv, cv, **f), f"y{i}")
    return gradc.compile(g, target=target, passes=None)(**feeds)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tables", [False, True])
def test_blocked_c_gemm_equals_reference_bit_for_bit(dtype, seed, tables, monkeypatch):
    """``tables``: 2-D float32/float64 products of any size take the prelude's gc_gemm (rows
    under 16 transposed; alpha 1 without c written in place), as large ones do by default."""
    if tables:
        if dtype is np.float16:
            pytest.skip("float16 always takes the blocked kernel")
        monkeypatch.setattr(gemm_module, "TABLES_MIN", 0)
        monkeypatch.setattr(gemm_module, "TABLES_MIN_FEW_ROWS", 0)
    else:
        monkeypatch.setattr(gemm_module, "TABLES_MIN", 1 << 62)
        monkeypatch.setattr(gemm_module, "TABLES_MIN_FEW_ROWS", 1 << 62)
    cases = _cases(np.random.default_rng(seed), dtype)
    want, got = _run("reference", cases), _run("c", cases)
    for i in range(len(cases)):
        assert_bits(got[f"y{i}"], want[f"y{i}"], nan_payload=False)


def test_symbolic_batch_and_rows_follow_the_runtime_size():
    """A symbolic batch (and so M known only at run time) drives the job split the same way."""
    rng = np.random.default_rng(5)
    g = gradc.Graph("sym")
    a = g.input("a", "float32", ("B", 37, 19))
    b = g.input("b", "float32", (1, 19, 45))
    c = g.input("c", "float32", (1, 37, 1))
    g.output(ops.gemm(a, b, c, alpha=0.5, beta=-2.0), "y")
    for nb in (1, 3):
        feeds = {"a": rng.standard_normal((nb, 37, 19)).astype(np.float32),
                 "b": rng.standard_normal((1, 19, 45)).astype(np.float32),
                 "c": rng.standard_normal((1, 37, 1)).astype(np.float32)}
        want = gradc.compile(g, target="reference", passes=None)(**feeds)["y"]
        got = gradc.compile(g, target="c", passes=None)(**feeds)["y"]
        assert_bits(got, want)
