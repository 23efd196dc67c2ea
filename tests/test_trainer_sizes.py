"""A Trainer whose model has a symbolic batch compiles its step per batch size on the C target
(``gradc.trainer``, ``gradc.executable.SizedExecutables``): each executable plans its
intermediate values in one arena, all of them read and update the Trainer's one state, and the
results are the bits of Trainers compiled with ``shapes`` bound, a final smaller batch
included; ``gradc train`` still trains that last batch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh

import gradc
import gradc.trainer
from gradc.cli import main
from gradc.train_data import Dataset
from gradc.trainer import MAX_SIZES

F32 = np.float32


def drop_bn_mlp() -> onnx.ModelProto:
    """Gemm -> BatchNormalization (training) -> Relu -> Dropout -> Gemm, batch ``N``: state of
    every kind (running statistics, the dropout state, Adam's moments), and random bits whose
    count follows the batch size."""
    r = np.random.default_rng(0)
    nodes = [oh.make_node("Gemm", ["x", "w1"], ["h"], transB=1),
             oh.make_node("BatchNormalization", ["h", "s", "b", "rm", "rv"], ["n", "rm2", "rv2"],
                          training_mode=1, momentum=0.9),
             oh.make_node("Relu", ["n"], ["a"]),
             oh.make_node("Dropout", ["a", "ratio", "train"], ["d"]),
             oh.make_node("Gemm", ["d", "w2"], ["logits"], transB=1)]
    inits = [nh.from_array(r.standard_normal((8, 4)).astype(F32), "w1"),
             nh.from_array(np.ones(8, F32), "s"), nh.from_array(np.zeros(8, F32), "b"),
             nh.from_array(np.zeros(8, F32), "rm"), nh.from_array(np.ones(8, F32), "rv"),
             nh.from_array(r.standard_normal((3, 8)).astype(F32), "w2"),
             nh.from_array(np.array(0.25, F32), "ratio"), nh.from_array(np.array(True), "train")]
    g = oh.make_graph(nodes, "drop_bn_mlp", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", 4])],
                      [oh.make_tensor_value_info("logits", TP.FLOAT, ["N", 3])], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 15)])


def data(n: int = 21) -> dict[str, np.ndarray]:
    r = np.random.default_rng(1)
    return {"x": r.standard_normal((n, 4)).astype(F32),
            "labels": r.integers(0, 3, n).astype(np.int64)}


def trainer(**options) -> gradc.Trainer:
    return gradc.Trainer(gradc.from_onnx(drop_bn_mlp()), gradc.optim.Adam(lr=0.05),
                         loss="cross_entropy", target="c", **options)


def epochs(n_epochs: int = 2, batch: int = 8) -> list[dict[str, np.ndarray]]:
    """The batches ``gradc train`` feeds: shuffled per epoch, the last one smaller."""
    b = Dataset("d", data()).batches(batch, shuffle=True, seed=0)
    return [x for e in range(n_epochs) for x in b.epoch_batches(e)]


def same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


def test_one_executable_per_batch_size_sharing_one_state():
    tr = trainer()
    assert tr.executables == {}  # symbolic: compiled for the first batch
    with pytest.raises(gradc.GradcError, match="no step compiled yet"):
        tr.executable
    arrays = {k: id(v) for k, v in tr._state.items()}
    losses = []
    for b in epochs():
        losses.append(tr.step(**b))
        assert tr.executable.arena_bytes is not None  # the step ran in its planned arena
        assert tr.last_step_bytes["allocated"] == 0  # every executable updates in place
    assert list(tr.executables) == [(("N", 8),), (("N", 5),)]  # 21 = 8 + 8 + 5, twice
    assert {k: id(v) for k, v in tr._state.items()} == arrays  # one state, never copied
    assert tr.steps == 6

    # The bits of Trainers compiled with the batch bound, the state handed over by
    # state_dict wherever the size changes.
    full, last = trainer(shapes={"N": 8}), trainer(shapes={"N": 5})
    assert list(full.executables) == [()] and full.executable.arena_bytes is not None
    want, current = [], full
    for b in epochs():
        other = full if len(b["x"]) == 8 else last
        if other is not current:
            other.load_state_dict(current.state_dict())
            current = other
        want.append(current.step(**b))
    assert losses == want
    assert same_bits(tr.state_dict(), current.state_dict())
    with pytest.raises(gradc.InputError, match="N=8"):  # shapes= binds it for every step
        full.step(**{k: v[:5] for k, v in data().items()})


def test_sizes_beyond_the_limit_share_one_unbound_executable(monkeypatch):
    assert MAX_SIZES >= 2  # a run's batch and its last, smaller one
    monkeypatch.setattr(gradc.trainer, "MAX_SIZES", 1)  # fewer programs to compile here
    tr, d = trainer(), data()
    for n in (3, 4, 5):
        tr.step(**{k: v[:n] for k, v in d.items()})
    assert list(tr.executables) == [(("N", 3),), ()]
    assert tr.executables[(("N", 3),)].arena_bytes is not None
    assert tr.executables[()].arena_bytes is None  # symbolic: allocates per call
    assert tr.executable is tr.executables[()]
    tr.step(**{k: v[:3] for k, v in d.items()})  # a size compiled before: its own again
    assert tr.executable is tr.executables[(("N", 3),)] and len(tr.executables) == 2


def test_a_batch_of_mismatched_sizes_compiles_nothing():
    tr = trainer()
    with pytest.raises(gradc.InputError, match="labels"):
        tr.step(x=data()["x"][:8], labels=data()["labels"][:7])
    with pytest.raises(gradc.InputError, match="missing array 'labels'"):
        tr.executable_for(x=data()["x"][:8])
    assert tr.executables == {} and tr.steps == 0
    exe = tr.executable_for(**{k: v[:8] for k, v in data().items()})
    assert list(tr.executables) == [(("N", 8),)] and tr.steps == 0
    assert tr.executable is exe


def test_other_targets_compile_once_with_the_batch_free():
    tr = gradc.Trainer(gradc.from_onnx(drop_bn_mlp()), gradc.optim.Adam(lr=0.05),
                       loss="cross_entropy", target="numpy")
    assert list(tr.executables) == [()]
    for b in epochs(1):
        tr.step(**b)
    assert list(tr.executables) == [()]


def test_gradc_train_still_trains_the_last_smaller_batch(tmp_path, capsys):
    """21 examples in batches of 8: 3 steps per epoch, the last of 5 examples, as the Python
    loop over the same batches trains (compiled for 8 and for 5)."""
    model, d = tmp_path / "m.onnx", tmp_path / "d.npz"
    onnx.save(drop_bn_mlp(), model)
    np.savez(d, **data())
    ck = tmp_path / "ck.npz"
    assert main(["train", str(model), "--data", str(d), "-o", str(tmp_path / "t.onnx"),
                 "--loss", "cross_entropy", "--lr", "0.05", "--epochs", "2", "--batch-size",
                 "8", "--checkpoint", str(ck), "--curve", ""]) == 0
    said = capsys.readouterr().out
    assert "21 examples, batch 8, 3 steps per epoch" in said
    tr = trainer()
    for b in epochs():
        tr.step(**b)
    with np.load(ck) as z:
        assert same_bits({k: z[k] for k in z.files}, tr.state_dict())
