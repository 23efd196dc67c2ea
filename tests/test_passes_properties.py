"""Property tests: on random training graphs every pass, and the default pipeline, leaves the
reference results unchanged bit for bit, never modifies its input, and prints and parses back."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings

import gradc
from gradc.passes import PASSES, optimize
from gradc.passes.fuse_elementwise import FuseElementwise
from gradc.passes.fuse_gradients import FuseGradients
from gradc.ir.fused import violations as contract_violations
from graphgen import GenGraph, make_graph, training_graphs

PIPELINES = sorted(PASSES) + ["default"]


def bits(a: np.ndarray) -> np.ndarray:
    """A view that compares -0.0, +0.0 and NaN payloads as different bit patterns."""
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def check_pipeline(case: GenGraph, passes: object) -> gradc.Graph:
    text = str(case.graph)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = case.run(None)
        opt = optimize(case.graph, passes)  # type: ignore[arg-type]
        ex = gradc.compile(opt.graph, target="reference", passes=None, shapes=case.shapes)
        got = ex(**case.feeds)
    assert str(case.graph) == text, "a pass modified its input"
    assert list(got) == list(want)
    assert [v.type for v in opt.graph.outputs] == [v.type for v in case.graph.outputs]
    for k in want:
        assert got[k].dtype == want[k].dtype
        np.testing.assert_array_equal(bits(got[k]), bits(want[k]), err_msg=f"output {k}")
    assert gradc.parse(str(opt.graph)) == opt.graph
    for n in opt.graph.nodes:
        if n.body is not None:
            assert contract_violations(n) == [], n
    return opt.graph


@settings(max_examples=40)
@given(training_graphs())
@pytest.mark.parametrize("passes", PIPELINES)
def test_pass_preserves_results(passes: str, case: GenGraph) -> None:
    check_pipeline(case, passes)


@settings(max_examples=20)
@given(training_graphs(max_ops=24))
def test_fusion_checked_on_networkx(case: GenGraph) -> None:
    check_pipeline(case, ["canonicalize", "cse", FuseGradients(check_cycles=True),
                          FuseElementwise(check_cycles=True)])


@settings(max_examples=20)
@given(training_graphs())
def test_canonicalize_reaches_a_fixpoint(case: GenGraph) -> None:
    once = optimize(case.graph, "canonicalize").graph
    assert not optimize(once, "canonicalize").report[0].changed


def test_larger_graphs() -> None:
    for seed in range(6):
        g = check_pipeline(make_graph(seed, n_ops=60), "default")
        assert any(n.op == "fused" for n in g.nodes)
