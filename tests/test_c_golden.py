"""Golden C: the C target's source for one small graph per kind of kernel, compared as text.

Each graph is optimized with the default passes and lowered to C (no C compiler is needed);
the source must equal ``tests/golden/c/<case>.c``, and a mismatch prints a unified diff. The
files hold the program with the prelude replaced by one marker line (``PRELUDE_MARK``): every
program copies ``prelude.h`` and ``transcend.h`` verbatim, which
``test_prelude_is_the_packaged_header`` checks.
``GRADC_UPDATE_GOLDEN=1`` rewrites the files (the switch of the NumPy golden test). The files
guard refactors of the emitters: a change that should not touch the generated C shows here.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

import gradc
from gradc import ops
from gradc.backends.c.emit import generate
from gradc.backends.c.kernel import STREAM_BLOCK
from gradc.backends.c.prelude import HEADERS, PRELUDE

GOLDEN = Path(__file__).parent / "golden" / "c"
UPDATE = os.environ.get("GRADC_UPDATE_GOLDEN") == "1"
PRELUDE_MARK = "/* ... prelude.h, copied verbatim (tests/test_c_golden.py checks it) ... */\n"


def elementwise() -> gradc.Graph:
    """One fused elementwise loop over the flat index, streamed when the output is large."""
    g = gradc.Graph("elementwise")
    x, dy = g.input("x", "float32", ("N", 16)), g.input("dy", "float32", ("N", 16))
    h = ops.relu_grad(x, ops.mul(ops.neg(x), dy))
    g.output(ops.clip_grad(x, h, -1.0, 1.0), "dx")
    g.output(ops.cast(h, "float16"), "h")
    return g


def elementwise_broadcast() -> gradc.Graph:
    """A loop nest: a broadcast operand (a bias) indexes by coordinates, not the flat index."""
    g = gradc.Graph("elementwise_broadcast")
    x, dy = g.input("x", "float32", ("N", 16)), g.input("dy", "float32", ("N", 16))
    b = g.input("b", "float32", (16,))
    g.output(ops.relu_grad(x, ops.mul(ops.add(x, b), dy)), "dx")
    return g


def max_pooling_grad_fused() -> gradc.Graph:
    """2x2 windows tiling float32 planes (the SSE2 pair path), a prologue and an epilogue."""
    g = gradc.Graph("max_pooling_grad_fused")
    x, q = g.input("x", "float32", ("N", 4, 8, 8)), g.input("q", "float32", ("N", 4, 8, 8))
    y, dy = g.input("y", "float32", ("N", 4, 4, 4)), g.input("dy", "float32", ("N", 4, 4, 4))
    d = ops.max_pooling_grad(x, ops.relu_grad(y, dy), (2, 2), (2, 2))
    g.output(ops.relu_grad(q, d), "dx")
    return g


def slice_grad_fused() -> gradc.Graph:
    """A strided, reversed window with a prologue and an epilogue."""
    g = gradc.Graph("slice_grad_fused")
    y, dy = g.input("y", "float32", ("N", 3, 4)), g.input("dy", "float32", ("N", 3, 4))
    q = g.input("q", "float32", ("N", 7, 4))
    d = ops.slice_grad(ops.relu_grad(y, dy), ("N", 7, 4), (0, 1, 0), ("N", 6, 4), (1, 2, -1))
    g.output(ops.clip_grad(q, d, -1.0, 1.0), "dx")
    return g


def resample_grad_fused() -> gradc.Graph:
    """Linear 2x upsampling's gradient (static planes: baked taps), prologue and epilogue."""
    g = gradc.Graph("resample_grad_fused")
    y, dy = g.input("y", "float32", ("N", 2, 8, 8)), g.input("dy", "float32", ("N", 2, 8, 8))
    q = g.input("q", "float32", ("N", 2, 4, 4))
    d = ops.resample_grad(ops.relu_grad(y, dy), ("N", 2, 4, 4), (1, 1, 2, 2), "linear")
    g.output(ops.relu_grad(q, d), "dx")
    return g


def _resample(mode: str) -> gradc.Graph:
    g = gradc.Graph(f"resample_{mode}")
    x = g.input("x", "float32", ("N", 2, 3, 5))
    g.output(ops.resample(x, (1, 1, 2, 2), mode), "y")
    return g


def slice_grad() -> gradc.Graph:
    """slice_grad alone: zeros and bit copies of dY."""
    g = gradc.Graph("slice_grad")
    dy = g.input("dy", "float32", ("N", 3, "M"))
    g.output(ops.slice_grad(dy, ("N", 7, "M"), (0, 1, 0), ("N", 6, "M"), (1, 2, -1)), "dx")
    return g


def cast_float16_epilogue() -> gradc.Graph:
    """Overlapping 3x3 windows (the separable pass) whose epilogue stores float16."""
    g = gradc.Graph("cast_float16_epilogue")
    x = g.input("x", "float32", ("N", 4, 8, 8))
    y, dy = g.input("y", "float32", ("N", 4, 4, 4)), g.input("dy", "float32", ("N", 4, 4, 4))
    d = ops.max_pooling_grad(x, ops.relu_grad(y, dy), (3, 3), (2, 2), (1, 1), (0, 0))
    g.output(ops.cast(d, "float16"), "dx")
    return g


def softmax_rows() -> gradc.Graph:
    """Softmax over the last axis (rows kernel: lane maximum, vectorized exp, the rows' sums
    advanced together) and log_softmax over a leading one (the general loop)."""
    g = gradc.Graph("softmax_rows")
    x = g.input("x", "float32", ("N", 37))
    g.output(ops.softmax(x, (1,)), "y")
    g.output(ops.log_softmax(x, (0,)), "z")
    return g


CASES: dict[str, Callable[[], gradc.Graph]] = {
    "elementwise": elementwise,
    "elementwise_broadcast": elementwise_broadcast,
    "max_pooling_grad_fused": max_pooling_grad_fused,
    "slice_grad_fused": slice_grad_fused,
    "resample_grad_fused": resample_grad_fused,
    "resample_nearest": lambda: _resample("nearest"),
    "resample_linear": lambda: _resample("linear"),
    "slice_grad": slice_grad,
    "cast_float16_epilogue": cast_float16_epilogue,
    "softmax_rows": softmax_rows,
}
# the fused group each case must lower to: (kind, with a prologue and an epilogue)
FUSED = {"elementwise": "elementwise", "elementwise_broadcast": "elementwise",
         "max_pooling_grad_fused": "max_pooling_grad",
         "slice_grad_fused": "slice_grad", "resample_grad_fused": "resample_grad",
         "cast_float16_epilogue": "max_pooling_grad"}


def optimized(name: str) -> gradc.Graph:
    """The case's graph after the default passes."""
    return gradc.optimize(CASES[name]()).graph


def c_source(name: str) -> str:
    """The C source of a case, as ``gradc compile -t c`` writes it."""
    return generate(optimized(name)).source


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_c(name):
    full = c_source(name)
    assert full.count(PRELUDE) == 1, "the program must copy the prelude once"
    src = full.replace(PRELUDE, PRELUDE_MARK)
    path = GOLDEN / f"{name}.c"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(src)
    want = path.read_text()
    if src != want:
        diff = "".join(difflib.unified_diff(want.splitlines(keepends=True),
                                            src.splitlines(keepends=True),
                                            f"tests/golden/c/{name}.c", "generated"))
        pytest.fail(f"generated C changed (GRADC_UPDATE_GOLDEN=1 updates the file):\n{diff}",
                    pytrace=False)


@pytest.mark.parametrize("name", sorted(FUSED))
def test_cases_lower_to_the_fused_group_they_show(name):
    """A pass change that stops fusing a case would leave its golden file showing other code."""
    nodes = optimized(name).nodes
    assert [n.op for n in nodes] == ["fused"]
    body = nodes[0].body
    kind = FUSED[name]
    assert nodes[0].attrs["kind"] == kind and body is not None
    if kind != "elementwise":
        ops_in_order = [n.op for n in body.nodes]
        at = ops_in_order.index(kind)
        assert 0 < at < len(ops_in_order) - 1, ops_in_order  # a prologue and an epilogue


def test_generated_c_does_not_depend_on_the_hash_seed():
    """Generation is deterministic: another process with other string hashes writes the same."""
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_c_golden as t; "
              "print(json.dumps({n: t.c_source(n) for n in t.CASES}))")
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)],
                           capture_output=True, text=True, env=env, check=True)
        assert json.loads(r.stdout) == {n: c_source(n) for n in CASES}


def test_prelude_is_the_packaged_header():
    """The headers (``prelude.h`` first) are package data, copied verbatim into every program,
    and agree with the Python side on the streamed block size."""
    here = Path(gradc.backends.c.__file__).parent
    assert HEADERS[0] == "prelude.h"
    header = "".join((here / h).read_text() for h in HEADERS)
    assert PRELUDE == header
    assert PRELUDE in c_source("elementwise")
    assert re.search(rf"^#define GC_BLK {STREAM_BLOCK}\b", PRELUDE, re.M)
