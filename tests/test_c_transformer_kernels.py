"""The C target's kernels for transformer steps: shared kernel functions, and the fused groups
of products (each compared bit for bit with the reference target)."""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c.emit import generate
from helpers import assert_bits

if shutil.which(os.environ.get("CC", "cc").split()[0]) is None:
    pytest.skip("no C compiler", allow_module_level=True)

F32 = np.float32


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("gradc-cache"))


def layers(depth: int) -> gradc.Graph:
    """``depth`` identical residual layers ``x + relu(x @ w_i^T)`` (distinct weights)."""
    r = np.random.default_rng(0)
    g = gradc.Graph("layers")
    x = g.input("x", "float32", (6, 24))
    with g:
        for i in range(depth):
            w = g.parameter(f"w{i}", (r.standard_normal((24, 24)) * 0.2).astype(F32))
            x = ops.add(x, ops.relu(ops.gemm(x, w, trans_b=True)))
    g.output(x, "y")
    return g


def test_identical_layers_share_their_kernel_functions(cache: str) -> None:
    """The kernels of identical layers have the same text: one C function each, called once
    per layer, so the program grows by calls, not functions, with depth; the profile still
    has a row per call, and the results are the reference's bits."""
    counts = []
    for depth in (3, 5):
        s = gradc.training_step(layers(depth), gradc.optim.AdamW(1e-2), loss="cross_entropy")
        prog = generate(gradc.optimize(s).graph)
        defined = set(re.findall(r"^static int (k\d+)\(", prog.source, re.M))
        called = re.findall(r"rc = (k\d+)\(", prog.source)
        assert set(called) == defined
        counts.append((len(defined), len(called)))
        assert len(prog.kernels) == len(called)
    (f3, c3), (f5, c5) = counts
    assert f5 == f3 and c5 > c3  # the first and last layers differ from the middle ones
    s = gradc.training_step(layers(5), gradc.optim.AdamW(1e-2), loss="cross_entropy")
    r = np.random.default_rng(1)
    feeds = {"x": r.standard_normal((6, 24)).astype(F32), "labels": np.arange(6) % 24,
             "step": np.array([1])}
    exe = gradc.compile(s, "c", profile=True, cache_dir=cache)
    got = exe(**feeds)
    want = gradc.compile(s, "reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k])
    assert len(exe.profile()) == c5
