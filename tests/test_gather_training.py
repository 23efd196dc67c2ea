"""Out-of-range indices in a training step (SPEC-transformers.md §26.3): a ``Trainer.step`` that
raises InputError leaves the parameters, the optimizer state and the step counter as they were,
on every target (the C target updates the state in place, so it checks every index before its
first in-place write), and the trainer goes on as if the bad batch had never come."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops

TARGETS = ("reference", "numpy", "c", "onnx")
F32 = np.float32


def embedding_model() -> gradc.Graph:
    """Token ids (4, 3) -> embedding E (6, 5) -> logits over 6 classes per token."""
    rng = np.random.default_rng(0)
    g = gradc.Graph("tiny_lm")
    tok = g.input("tokens", "int64", (4, 3))
    e = g.parameter("E", rng.standard_normal((6, 5)).astype(F32))
    w = g.parameter("W", rng.standard_normal((5, 6)).astype(F32))
    h = ops.reshape(ops.gather(e, tok), (12, 5))
    g.output(ops.gemm(ops.mean_variance_normalization(h), w), "logits")
    return g


def batch(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(10 + i)
    return {"tokens": rng.integers(-6, 6, (4, 3)), "labels": rng.integers(0, 6, 12)}


def trainer(target: str) -> gradc.Trainer:
    return gradc.Trainer(embedding_model(), gradc.optim.AdamW(0.05), loss="cross_entropy",
                         target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_step_with_a_bad_token_changes_nothing(target):
    tr = trainer(target)
    tr.step(**batch(0))
    before = tr.state_dict()
    bad = batch(1)
    bad["tokens"][2, 1] = 6  # one past the vocabulary
    with pytest.raises(gradc.InputError) as info:
        tr.step(**bad)
    assert str(info.value) == ("gather: indices[2, 1] = 6: expected an index in -6..5 "
                               "(input.shape[axis] = 6)")
    after = tr.state_dict()
    assert tr.steps == 1 and sorted(after) == sorted(before)
    for k, v in before.items():
        assert after[k].tobytes() == v.tobytes(), k  # parameters, moments, step
    # and it goes on exactly as a trainer that never saw the bad batch
    tr.step(**batch(2))
    ref = trainer(target)
    ref.step(**batch(0))
    ref.step(**batch(2))
    for k, v in ref.state_dict().items():
        assert tr.state_dict()[k].tobytes() == v.tobytes(), k


def test_the_c_target_checks_before_its_first_in_place_write():
    """An in-place update that needs nothing the gather computes would run first (sinks run
    early); the C program moves it after the check, so the input it overwrites survives."""
    g = gradc.Graph("order")
    p = g.input("p", "float32", (64,))
    table, idx = g.input("table", "float32", (5, 3)), g.input("idx", "int64", (4,))
    g.output(ops.mul(p, ops.constant(np.array(0.5, F32))), "p.next")
    g.output(ops.gather(table, ops.add(idx, ops.constant(np.array(1, np.int64)))), "y")
    ex = gradc.compile(g, target="c", update_in_place={"p.next": "p"})
    assert ex.in_place == {"p.next": "p"}
    arr = np.arange(64, dtype=F32)
    ok = ex(p=arr, table=np.zeros((5, 3), F32), idx=np.array([0, 1, 2, 3]))
    assert ok["p.next"] is arr and arr[2] == 1.0  # updated in place
    with pytest.raises(gradc.InputError, match=r"indices\[3\] = 5"):
        ex(p=arr, table=np.zeros((5, 3), F32), idx=np.array([0, 1, 2, 4]))
    assert arr[2] == 1.0  # not halved again


def test_a_write_that_cannot_move_after_the_check_loses_its_grant():
    """An in-place update whose result a later kernel reads before the check: the update gets a
    buffer of its own (the input survives a failed call)."""
    g = gradc.Graph("grant")
    p = g.input("p", "float32", (8,))
    nxt = ops.mul(p, ops.constant(np.array(0.5, F32)))
    g.output(nxt, "p.next")
    big = ops.cast(ops.greater(nxt, ops.constant(np.array(1.0, F32))), "int64")
    idx = ops.reduce_sum(big, keepdims=True)  # 5 of the 8 halves exceed 1
    g.output(ops.gather(g.input("table", "float32", (3, 2)), idx), "y")
    ex = gradc.compile(g, target="c", passes=None, update_in_place={"p.next": "p"})
    arr = np.arange(8, dtype=F32)
    with pytest.raises(gradc.InputError, match=r"indices\[0\] = 5"):
        ex(p=arr, table=np.zeros((3, 2), F32))
    np.testing.assert_array_equal(arr, np.arange(8, dtype=F32))


def test_a_check_already_made_holds_no_update_back():
    """The backward's gather_grad reads the forward gather's indices against the same size: it
    cannot fail once the forward passed, so only the forward gather is a barrier for the
    in-place updates (which then keep their early places next to their gradients)."""
    from gradc.backends.plan import barriers
    g = gradc.Graph("emb")
    e, i = g.input("e", "float32", (6, 5)), g.input("i", "int64", (4,))
    y = ops.gather(e, i)
    d = ops.gather_grad(y, i, (6, 5))
    d2 = ops.gather_grad(y, i, (7, 5))  # a larger size: covered too
    d3 = ops.gather_grad(ops.gather(d2, i), i, (3, 5))  # a smaller one: may fail
    for v, name in ((d, "d"), (d2, "d2"), (d3, "d3")):
        g.output(v, name)
    nodes = list(g.nodes)
    found = barriers(nodes, lambda v: v)
    assert found == {y.producer, d3.producer}


def scaled_lookup() -> gradc.Graph:
    """gather(x * exp(sum(s)), idx): differentiated, the elementwise ``x * e`` that feeds the
    forward ``gather`` and the ``grad_x = grad * e`` that reads the backward ``gather_grad``
    share ``e``, so elementwise fusion would put them in one group and run the ``gather_grad``
    before the ``gather`` (the class fuzz seed 10101 found)."""
    g = gradc.Graph("scaled_lookup")
    x = g.input("x", "float32", (2,))
    s = g.input("s", "float32", (2, 3))
    idx = g.input("idx", "int64", (4,))
    e = ops.exp(ops.reduce_sum(s, axes=[1]))
    g.output(ops.gather(ops.mul(x, e), idx, axis=0), "y")
    return gradc.grad(g, wrt="x")


@pytest.mark.parametrize("target", TARGETS)
def test_the_forward_gather_reports_a_bad_index_before_its_gradient(target):
    """The forward gather and the backward gather_grad read the same out-of-range index: the
    first in graph order (the gather) names the error on every target, after fusion too."""
    tg = scaled_lookup()
    arrays = {"x": np.ones(2, F32), "s": np.zeros((2, 3), F32), "idx": np.array([0, 1, 2, 0]),
              "grad_y": np.ones(4, F32)}
    with pytest.raises(gradc.InputError) as info:
        gradc.compile(tg, target=target)(**arrays)
    assert str(info.value) == ("gather: indices[2] = 2: expected an index in -2..1 "
                               "(input.shape[axis] = 2)")


def test_fusion_keeps_the_checking_nodes_in_their_order():
    tg = scaled_lookup()
    opt = gradc.optimize(tg).graph
    order = [n.op for n in opt.nodes if n.op in ("gather", "gather_grad")]
    assert order == ["gather", "gather_grad"]
    assert any(n.op == "fused" for n in opt.nodes)  # the rest still fuses
