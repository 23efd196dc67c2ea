"""The cuda target's step as a DAG (``backends/cuda/dag.py``): which launches must follow which,
and how they are spread over streams.

- ``dependencies`` against a brute force over random programs: every pair of launches that
  touch a common byte, one of them writing it, is ordered (directly or through a chain), and
  every edge given is such a pair;
- ``assign_streams``: every dependency is met by the stream's own order or by a wait;
- whole training steps replayed by the host harness in random orders of their DAG (as the
  GPU's streams may run them) give the sequential order's bits, and a bad index still raises
  with the state untouched.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradc
from gradc import ops
from gradc.backends.cuda import dag

from cuda_cases import tiny_cnn
from helpers import assert_bits, cuda_targets

needs_host = pytest.mark.skipif("cuda-host" not in cuda_targets(),
                                reason="the host harness is not among the targets")


@dataclass(frozen=True)
class L:
    reads: tuple[tuple[int, int], ...]
    writes: tuple[tuple[int, int], ...]


def _overlap(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    return any(lo < h and l2 < hi for lo, hi in a for l2, h in b)


def _conflict(x: L, y: L) -> bool:
    return _overlap(x.writes, y.reads + y.writes) or _overlap(x.reads, y.writes)


spans = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12)).map(
    lambda t: (t[0], t[0] + t[1])), max_size=3).map(tuple)
programs = st.lists(st.builds(L, spans, spans), max_size=30)


@settings(max_examples=300, deadline=None)
@given(programs)
def test_every_conflicting_pair_is_ordered_and_every_edge_is_a_conflict(launches):
    deps = dag.dependencies(launches)
    after: list[set[int]] = []  # launch -> every launch it follows, through any chain
    for j, ds in enumerate(deps):
        assert list(ds) == sorted(set(ds)) and all(d < j for d in ds)
        assert all(_conflict(launches[d], launches[j]) for d in ds), (j, ds)
        after.append(set(ds).union(*(after[d] for d in ds)))
    for j in range(len(launches)):
        for i in range(j):
            if _conflict(launches[i], launches[j]):
                assert i in after[j], (i, j)


@settings(max_examples=200, deadline=None)
@given(programs, st.integers(1, 5))
def test_streams_meet_every_dependency(launches, streams):
    deps = dag.dependencies(launches)
    plan = dag.assign_streams(deps, streams)
    assert len({s for s, _ in plan}) <= streams
    # what the streams and their waits order: each launch follows its stream's previous
    # launch and the launches it waits for, and everything those follow
    after: list[set[int]] = []
    last: dict[int, int] = {}
    for j, (s, waits) in enumerate(plan):
        direct = set(waits) | ({last[s]} if s in last else set())
        after.append(direct.union(*(after[d] for d in direct)))
        last[s] = j
        assert set(waits) <= set(deps[j])
        assert set(deps[j]) <= after[j], (j, deps[j], after[j])  # every dependency met


def test_one_stream_is_the_chain_of_launches():
    deps = [(), (), (0,), ()]
    assert dag.assign_streams(deps, 1) == [(0, ()), (0, ()), (0, ()), (0, ())]
    assert dag.assign_streams(deps, 8) == [(0, ()), (1, ()), (0, ()), (2, ())]


def test_implied_dependencies_are_not_waited_for():
    # 3 on 2's stream, after 2, which waited for 0: 0, 1 and 2 are all behind it
    assert dag.assign_streams([(), (), (0, 1), (0, 1, 2)], 4) == [
        (0, ()), (1, ()), (1, (0,)), (1, ())]
    # 4 on 3's stream waits for 2 alone: 0 is behind 2
    assert dag.assign_streams([(), (), (0,), (1,), (2, 3, 0)], 4) == [
        (0, ()), (1, ()), (0, ()), (1, ()), (1, (2,))]


def test_random_orders_respect_the_dependencies():
    deps = [(), (0,), (), (1, 2), (0,), (3, 4)]
    rng = random.Random(4)
    orders = {tuple(dag.random_order(deps, rng)) for _ in range(200)}
    assert len(orders) > 5
    for order in orders:
        at = {j: i for i, j in enumerate(order)}
        assert len(at) == len(deps) and all(at[d] < at[j] for j, ds in enumerate(deps)
                                            for d in ds)


def _lm() -> gradc.Graph:
    """Token ids -> embedding -> layer norm (scale, bias) -> gemm: gather's range check (the
    error record), a gradient that scatters back through gather_grad, and the layer norm's
    parameter gradients, which read statistics its first launch saved in scratch."""
    rng = np.random.default_rng(0)
    g = gradc.Graph("tiny_lm")
    tok = g.input("tokens", "int64", (4, 3))
    e = g.parameter("E", rng.standard_normal((6, 5)).astype(np.float32))
    w = g.parameter("W", rng.standard_normal((5, 6)).astype(np.float32))
    s = g.parameter("S", rng.standard_normal((5,)).astype(np.float32))
    b = g.parameter("B", rng.standard_normal((5,)).astype(np.float32))
    h = ops.reshape(ops.gather(e, tok), (12, 5))
    g.output(ops.gemm(ops.mean_variance_normalization(h, s, b), w), "logits")
    return g


@needs_host
@pytest.mark.parametrize("model", ["cnn", "lm"])
def test_steps_replayed_in_random_orders_of_their_dag_give_the_same_bits(model, tmp_path):
    make = tiny_cnn if model == "cnn" else _lm
    rng = np.random.default_rng(1)
    if model == "cnn":
        batches = [{"x": rng.standard_normal((4, 3, 6, 6), dtype=np.float32),
                    "labels": rng.integers(0, 5, 4)} for _ in range(3)]
    else:
        batches = [{"tokens": rng.integers(-6, 6, (4, 3)), "labels": rng.integers(0, 6, 12)}
                   for _ in range(3)]
    opt = gradc.optim.AdamW(0.05)

    def trainer(seed: int | None) -> gradc.Trainer:
        tr = gradc.Trainer(make(), opt, loss="cross_entropy", target="cuda", runtime="host",
                           cache_dir=str(tmp_path))
        if seed is not None:
            tr.executable._runner.driver.shuffle = random.Random(seed)
        return tr

    plain = trainer(None)
    deps = plain.executable._runner.program.dependencies
    assert any(len(ds) < j for j, ds in enumerate(deps) if j)  # not a mere chain
    want = [plain.step(**b) for b in batches]
    for seed in range(3):
        tr = trainer(seed)
        assert [tr.step(**b) for b in batches] == want
        graph = tr.executable._runner.graph
        assert [x[0] for x in graph] != [x[0] for x in plain.executable._runner.graph]
        for k, v in plain.state_dict().items():
            assert_bits(tr.state_dict()[k], v)
        if model == "lm":
            before = tr.state_dict()
            bad = dict(batches[0], tokens=np.full((4, 3), 6))
            with pytest.raises(gradc.InputError, match="gather: indices"):
                tr.step(**bad)
            for k, v in before.items():
                assert_bits(tr.state_dict()[k], v)
