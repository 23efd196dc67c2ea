"""The character-level GPT example (examples/README.md): the committed model, data and corpus
agree with ``make_char_gpt.py``, and the README's ``gradc train`` command trains it (a few
steps on a subset) into a model that ``sample_char_gpt.py`` samples from."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper as nh

import gradc
from gradc.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MODEL = EXAMPLES / "char_gpt.onnx"


@pytest.fixture(scope="module")
def scripts():
    """``make_char_gpt`` and ``sample_char_gpt``, imported from examples/."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import make_char_gpt
        import sample_char_gpt
    finally:
        sys.path.remove(str(EXAMPLES))
    return make_char_gpt, sample_char_gpt


def committed(name: str) -> dict[str, np.ndarray]:
    with np.load(EXAMPLES / name, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_vocabulary_data_and_model_agree(scripts):
    """The npz files are what the script derives from the corpus (so their ids are positions
    in the corpus's sorted character set), and the model's tied embedding, position table and
    output have the vocabulary's and the windows' sizes."""
    make, _ = scripts
    text = make.read_corpus()
    vocab = make.vocabulary(text)
    assert len(text) == 200_000 and len(vocab) == 62 and vocab[0] == "\n"
    train, val = make.datasets(text)
    for name, fresh in (("shakespeare.npz", train), ("shakespeare_val.npz", val)):
        kept = committed(name)
        assert sorted(kept) == ["idx", "labels"]
        for key in kept:
            assert kept[key].dtype == np.int64, (name, key)
            np.testing.assert_array_equal(kept[key], fresh[key], err_msg=f"{name}: {key}")
        # labels are the next characters of idx
        np.testing.assert_array_equal(kept["labels"][:, :-1], kept["idx"][:, 1:])
    # the first training window decodes to the corpus's first characters, the validation
    # windows come from its last 10%
    assert "".join(vocab[i] for i in train["idx"][0]) == text[:64]
    cut = int(len(text) * 0.9)
    assert "".join(vocab[i] for i in val["idx"][0]) == text[cut:cut + 64]
    m = onnx.load(MODEL)
    inits = {t.name: nh.to_array(t) for t in m.graph.initializer}
    assert inits["wte.weight"].shape == (len(vocab), make.WIDTH)
    assert inits["wpe.weight"].shape == (make.CONTEXT, make.WIDTH)
    g = gradc.from_onnx(MODEL)
    assert [str(d) for d in g.inputs[0].type.shape] == ["batch", "64"]
    assert [str(d) for d in g.outputs[0].type.shape] == ["batch", "64", "62"]
    # tied: one parameter, read by the embedding and by the output projection
    assert "lm_head.weight" not in {p.name for p in g.parameters}


def test_char_gpt_onnx_is_what_make_char_gpt_writes(scripts):
    pytest.importorskip("torch")
    make, _ = scripts
    fresh = onnx.load_from_string(make.export(make.model(62)))
    kept = onnx.load(MODEL)
    assert [n.op_type for n in fresh.graph.node] == [n.op_type for n in kept.graph.node]
    for a, b in zip(fresh.graph.initializer, kept.graph.initializer, strict=True):
        assert a.name == b.name
        np.testing.assert_array_equal(nh.to_array(a), nh.to_array(b), err_msg=a.name)


def test_the_readme_command_trains_and_the_sample_script_reads_the_result(scripts, tmp_path,
                                                                          capsys):
    """The README's flags on 32 training and 16 validation windows, batch 8 (4 steps), on the
    reference target: the first step's loss is the untrained model's, ln 62 (GPT-2's small
    initialization makes every logit nearly 0), the printed figures are finite, and the
    trained model generates text from the vocabulary in onnxruntime."""
    _, sample = scripts
    train, val = committed("shakespeare.npz"), committed("shakespeare_val.npz")
    np.savez(tmp_path / "train.npz", **{k: v[:32] for k, v in train.items()})
    np.savez(tmp_path / "val.npz", **{k: v[:16] for k, v in val.items()})
    out = tmp_path / "trained.onnx"
    assert main(["train", str(MODEL), "--data", str(tmp_path / "train.npz"), "--val-data",
                 str(tmp_path / "val.npz"), "--loss", "cross_entropy", "--class-axis", "-1",
                 "--optimizer", "adamw", "--lr", "3e-3", "--schedule", "warmup-cosine",
                 "--warmup-steps", "1", "--total-steps", "4", "--max-grad-norm", "1.0",
                 "--epochs", "1", "--batch-size", "8", "-t", "reference", "-o", str(out),
                 "--curve", ""]) == 0
    said = capsys.readouterr().out
    line = next(s for s in said.splitlines() if s.startswith("epoch 1/1: "))
    figures = dict(part.rsplit(" ", 1) for part in line.split(" (")[0][11:].split(", "))
    assert set(figures) == {"train loss", "train token accuracy", "val loss",
                            "val token accuracy"}
    assert math.isfinite(float(figures["train loss"]))
    assert 3.0 < float(figures["val loss"]) < 4.2
    tr = gradc.Trainer(gradc.from_onnx(MODEL), gradc.optim.AdamW(lr=3e-3),
                       loss="cross_entropy", class_axis=-1, target="reference")
    first = tr.step(idx=train["idx"][:8], labels=train["labels"][:8])
    assert abs(first - math.log(62)) < 0.01
    text = sample.generate(str(out), "ROMEO:\n", 8, seed=0)
    assert len(text) == 15 and text.startswith("ROMEO:\n")
    assert set(text) <= set(EXAMPLES.joinpath("shakespeare_200k.txt").read_text())
    assert sample.generate(str(out), "ROMEO:\n", 8, seed=None) == \
        sample.generate(str(out), "ROMEO:\n", 8, seed=None)
