"""Unit tests of the pass infrastructure: manager, report, instruments, driver, cost, fusion."""

from __future__ import annotations

import io
import pathlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.errors import GradcError, VerifyError
from gradc.ir.core import Node, Value
from gradc.passes import (PASSES, DiffEach, DumpIR, Pass, PassResult, PassStatistics, Pattern,
                          PrintAfterAll, PrintAfterChange, TimePasses, apply_patterns,
                          default_pipeline, instruments_from_flags, optimize)
from gradc.passes.constant_fold import ConstantFold
from gradc.passes.cost import graph_bytes, node_bytes
from gradc.passes.fuse_elementwise import FuseElementwise, find_groups
from gradc.ir.fused import violations as contract_violations
from gradc.passes.fusion import assert_acyclic
from gradc.passes.instruments import dump_name
from gradc.passes.rewriter import Rewriter
from gradc.examples import train_step

HERE = pathlib.Path(__file__).parent / "passes_ir"
PIPELINE = ["canonicalize", "cse", "constant-fold", "dce", "relu-mask-from-output",
            "fuse-gradients", "fuse-elementwise", "dce"]


def small() -> gradc.Graph:
    g = gradc.Graph("small")
    x = g.input("x", "float32", (4,))
    dy = g.input("dy", "float32", (4,))
    a = ops.relu_grad(ops.relu(x), dy)
    g.output(ops.neg(ops.relu_grad(x, a)), "out")
    return g


def test_default_pipeline() -> None:
    assert default_pipeline() == PIPELINE
    assert set(PIPELINE) <= set(PASSES)
    assert all(name == name.lower() and " " not in name for name in PASSES)


def test_report_entries() -> None:
    g = train_step()
    before = str(g)
    opt = optimize(g)
    assert str(g) == before  # the input is never modified
    assert [e.name for e in opt.report] == PIPELINE
    for e in opt.report:
        assert isinstance(e.changed, bool) and e.seconds >= 0
        assert {"nodes-before", "nodes-after", "bytes-before", "bytes-after"} <= set(e.stats)
        assert gradc.parse(e.ir) == e.graph
    assert opt.report[-1].ir == str(opt.graph)
    fg = next(e for e in opt.report if e.name == "fuse-gradients")
    assert fg.changed and fg.stats["groups"] == 1 and fg.stats["nodes-fused"] == 3
    assert fg.stats["bytes-after"] < fg.stats["bytes-before"]
    assert opt.report[0].stats["bytes-before"] == graph_bytes(g)


def test_pass_lists() -> None:
    g = small()
    assert optimize(g, None).report == [] and optimize(g, None).graph is g
    assert [e.name for e in optimize(g, "dce, cse").report] == ["dce", "cse"]
    assert [e.name for e in optimize(g, ["cse", ConstantFold(8)]).report] == ["cse",
                                                                            "constant-fold"]
    with pytest.raises(VerifyError, match="no-such-pass"):
        optimize(g, "cse,no-such-pass")


def test_compile_uses_pipeline() -> None:
    g = train_step()
    ex = gradc.compile(g, target="reference", passes="default")
    assert any(n.op == "fused" for n in ex.graph.nodes)
    assert not any(n.op == "fused" for n in gradc.compile(g, "reference", passes=None).graph.nodes)


def test_instruments() -> None:
    g = small()
    out = {k: io.StringIO() for k in ("all", "change", "diff", "time", "stats")}
    opt = optimize(g, "canonicalize,cse", instruments=[
        PrintAfterAll(out["all"]), PrintAfterChange(out["change"]), DiffEach(out["diff"]),
        TimePasses(out["time"]), PassStatistics(out["stats"])])
    assert "IR after 001 canonicalize (changed)" in out["all"].getvalue()
    assert "IR after 002 cse (unchanged)" in out["all"].getvalue()
    assert "cse" not in out["change"].getvalue()
    assert opt.report[0].ir in out["change"].getvalue()
    diff = out["diff"].getvalue()
    assert "--- before canonicalize" in diff and "+++ after canonicalize" in diff
    assert "-  %1 = relu_grad(%0, %dy) : f32[4]" in diff
    assert "Total" in out["time"].getvalue() and "canonicalize" in out["time"].getvalue()
    assert "rewritten:relu-grad-of-relu" in out["stats"].getvalue()


def test_dump_ir(tmp_path) -> None:
    g = small()
    opt = optimize(g, "canonicalize,dce", instruments=[DumpIR(tmp_path / "d")])
    names = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert names == ["000-input.ir", "001-canonicalize.ir", "002-dce.ir"]
    assert dump_name(3, "fuse-elementwise") == "003-fuse-elementwise.ir"
    assert (tmp_path / "d" / "000-input.ir").read_text() == str(g) + "\n"
    assert (tmp_path / "d" / "002-dce.ir").read_text() == opt.report[1].ir + "\n"


def test_instruments_from_flags(tmp_path) -> None:
    s = io.StringIO()
    kinds = [type(i) for i in instruments_from_flags(
        print_after_all=True, time_passes=True, dump_ir=str(tmp_path), diff=True,
        statistics=True, stream=s)]
    assert kinds == [PrintAfterAll, DiffEach, TimePasses, PassStatistics, DumpIR]
    assert [type(i) for i in instruments_from_flags(print_after_change=True)] == [
        PrintAfterChange]
    assert instruments_from_flags() == []


@dataclass
class BreakTypes(Pass):
    """A broken pass: its result claims a wrong type."""

    name = "break-types"

    def run(self, graph: gradc.Graph) -> PassResult:
        g = gradc.Graph("bad")
        x = g.input("x", "float32", (4,))
        g.append(Node("relu", [x], {}, [gradc.TensorType(gradc.DType.float16, (4,))]))
        g.add_output(g.nodes[0].outputs[0])
        return PassResult(g, True)


def test_verify_each() -> None:
    with pytest.raises(VerifyError, match="pass break-types produced an invalid graph"):
        optimize(small(), [BreakTypes()])
    assert optimize(small(), [BreakTypes()], verify_each=False).report[0].changed


@dataclass(frozen=True)
class DropNeg(Pattern):
    name = "drop-neg"
    roots = ("neg",)

    def match(self, node: Node, rw: Rewriter) -> dict | None:
        return {}

    def rewrite(self, node: Node, b: dict, rw: Rewriter) -> Sequence[Value]:
        return [rw.operand(node, 0)]


@dataclass(frozen=True)
class Spin(Pattern):
    name = "spin"
    roots = ("neg",)

    def match(self, node: Node, rw: Rewriter) -> dict | None:
        return {}

    def rewrite(self, node: Node, b: dict, rw: Rewriter) -> Sequence[Value]:
        return [rw.create("neg", [rw.operand(node, 0)])]


def test_pattern_driver() -> None:
    g = gradc.Graph("chain")
    x = g.input("x", "int32", (3,))
    v = x
    for _ in range(50):
        v = ops.neg(v)
    g.output(ops.relu(v), "y")
    new, changed, stats = apply_patterns(g, [DropNeg()])
    assert changed and stats["rewritten:drop-neg"] == 50
    assert [n.op for n in new.nodes] == ["relu"] and len(g.nodes) == 51
    with pytest.raises(GradcError, match="did not converge"):
        apply_patterns(g, [Spin()], max_rewrites=100)


def test_cost_model() -> None:
    g = gradc.Graph("c")
    x = g.input("x", "float32", ("N", 4))
    r = ops.relu(x)
    c = ops.constant(np.ones((1, 4), np.float32), graph=g)
    m = ops.mul(r, r)
    e = ops.expand(c, m)
    g.output(ops.add(m, e), "y")
    n_relu, n_const, n_mul, n_expand, _ = g.nodes
    assert node_bytes(n_relu) == 32 and node_bytes(n_relu, {"N": 8}) == 256
    assert node_bytes(n_const) == 0
    assert node_bytes(n_mul) == 32  # reads r once
    assert node_bytes(n_expand) == 16 + 16  # does not read ``like``
    fused = optimize(g, "fuse-elementwise").graph
    (f,) = [n for n in fused.nodes if n.op == "fused"]
    assert graph_bytes(fused) == node_bytes(f) == 16 + 16 + 16  # x, c in; y out


def test_constant_fold_limits() -> None:
    g = gradc.Graph("c")
    x = g.input("x", "float32", (3,))
    c = ops.constant(np.arange(3, dtype=np.float32), graph=g)
    s = ops.reduce_sum(ops.neg(c), axes=(0,))
    g.output(ops.mul(x, ops.relu(c)), "y")
    g.output(s, "s")
    assert optimize(g, [ConstantFold(max_elements=2)]).report[0].stats["nodes-folded"] == 0
    opt = optimize(g, "constant-fold")
    assert opt.report[0].stats["nodes-folded"] >= 2
    assert [v.type for v in opt.graph.outputs] == [v.type for v in g.outputs]


def test_canonicalize_rule_subset() -> None:
    g = small()
    from gradc.passes.canonicalize import Canonicalize
    r = optimize(g, [Canonicalize(rules=("relu-grad-twice",))]).report[0]
    assert "rewritten:relu-grad-of-relu" not in r.stats
    assert r.stats["rewritten:relu-grad-twice"] == 1  # relu(x) and x are the same mask
    assert [n.op for n in r.graph.nodes] == ["relu", "relu_grad", "neg"]
    r = optimize(g, "canonicalize").report[0]
    assert r.stats["rewritten:relu-grad-of-relu"] == 1 and r.stats["rewritten:relu-grad-twice"] == 1


def cycle_graph() -> gradc.Graph:
    g = gradc.Graph("cyc")
    x = g.input("x", "float32", (1, 4))
    dy = g.input("dy", "float32", (1, 4))
    a = ops.relu_grad(x, dy)
    b = ops.resample(a, scales=(1.0, 1.0), interpolation_mode="linear")
    g.output(ops.add(a, b), "y")
    return g


def test_fusion_never_makes_a_cycle() -> None:
    g = cycle_graph()
    a, _, c = g.nodes
    with pytest.raises(GradcError, match="cycle"):
        assert_acyclic(g, [[a, c]])
    assert find_groups(g) == []
    assert optimize(g, [FuseElementwise(check_cycles=True)]).graph == g


def test_cycle_through_two_groups() -> None:
    text = (HERE / "fuse_elementwise_cycle_two_groups.ir").read_text()
    g = gradc.parse(text.split("# CHECK:")[0])
    a, b, s, c, d = g.nodes
    for group in ([a, d], [b, c]):
        assert_acyclic(g, [group])  # each group alone is fine
    with pytest.raises(GradcError, match="cycle"):
        assert_acyclic(g, [[a, d], [b, c]])  # together they are not
    assert [sorted(n.outputs[0].name for n in m) for m in find_groups(g)] == [["b", "c", "d"]]


def test_fused_contract_and_round_trip() -> None:
    opt = optimize(train_step())
    fused = [n for n in opt.graph.nodes if n.op == "fused"]
    assert sorted(n.attrs["kind"] for n in fused) == ["elementwise", "elementwise",
                                                      "max_pooling_grad"]
    for n in fused:
        assert contract_violations(n) == []
    assert gradc.parse(str(opt.graph)) == opt.graph
    assert optimize(opt.graph, "fuse-gradients,fuse-elementwise").report[0].changed is False


def test_bad_pass_arguments_are_verify_errors():
    from gradc.passes.canonicalize import Canonicalize
    g = gradc.examples.train_step()
    for bad in (123, "nope", ["cse", 4]):
        with pytest.raises(gradc.VerifyError, match="passes"):
            gradc.optimize(g, bad)
    with pytest.raises(gradc.VerifyError, match="rules: expected names"):
        Canonicalize(rules=("nope",))
    with pytest.raises(gradc.VerifyError, match="rules: expected a tuple"):
        Canonicalize(rules="relu_grad_of_relu")


def test_dump_ir_folder_holds_only_the_last_pipeline(tmp_path):
    from gradc.passes import DumpIR
    g = gradc.examples.train_step()
    gradc.optimize(g, "default", instruments=[DumpIR(tmp_path)])
    (tmp_path / "notes.txt").write_text("mine")
    gradc.optimize(g, "cse", instruments=[DumpIR(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000-input.ir", "001-cse.ir",
                                                           "notes.txt"]
