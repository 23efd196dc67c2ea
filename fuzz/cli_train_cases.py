"""Inputs of ``gradc train`` and the training flags for the ``cli`` harness.

``step_flags`` draws the flags that ``train-step`` and ``train`` share, those of
SPEC-transformers §29 included (``--class-axis``, ``--ignore-index``, ``--max-grad-norm``,
``--schedule`` with ``--warmup-steps``/``--total-steps``, ``--train``/``--frozen`` patterns),
valid mostly. ``train_case`` draws a model for ``gradc train`` (an MLP or CNN, or a
transformer-shaped model, with its weights as initializers), a data file and now and then a
``--val-data`` file, with one defect now and then (a missing, extra or misshapen array, a wrong
dtype, NaN, a label out of range, example counts that differ, no example, an object array, a
file that is no archive, a folder, a missing path).

A data file is written when the command runs (``write_data``): its arrays follow from the
model's inputs and first output (the payload holds the recipe, not the arrays), so the
minimizer can shrink the model and the data follow.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

DEFECTS = ("missing_array", "extra_array", "wrong_dtype", "wrong_shape", "nan", "bad_label",
           "count_mismatch", "empty", "object_array", "not_npz", "float_labels")
PATTERNS = ("*", "w*", "w*", "w1*", "?2", "[!w]*", "nope*", "", "[", "*lora_*", "w[0-9]*",
            "**", "*", "w?")


def step_flags(rng: random.Random, hostile: Any, classes_at: int | None) -> list[str]:
    """Flags of the training step (``hostile(p)`` says whether to draw a bad one and notes
    it); ``classes_at``: the model's class axis when known."""
    argv: list[str] = []
    if rng.random() < 0.25:
        axis = classes_at if classes_at is not None else rng.choice((1, -1))
        if hostile(0.1):
            axis = rng.choice((7, -9, 2 ** 63))
        argv += ["--class-axis", str(axis)]
    if rng.random() < 0.2:
        argv += ["--ignore-index", rng.choice(("-100", "0", "1")) if not hostile(0.1) else
                 rng.choice(("1.5", str(2 ** 63), "x", ""))]
    if rng.random() < 0.25:
        argv += ["--max-grad-norm", rng.choice(("1.0", "0.5", "1e-3", "1e10")) if not
                 hostile(0.1) else rng.choice(("0", "-1", "nan", "inf", "x"))]
    if rng.random() < 0.25:
        argv += ["--schedule", rng.choice(("warmup-cosine", "warmup-linear"))
                 if not hostile(0.05) else "cosine"]
        w, t = rng.choice(((0, 1), (1, 3), (2, 2), (0, 100)))
        if hostile(0.1):
            w, t = rng.choice(((3, 2), (-1, 5), (0, 0), (0, 2 ** 63)))
        if rng.random() < 0.6:
            argv += ["--warmup-steps", str(w)]
        if not hostile(0.05):
            argv += ["--total-steps", str(t)]
    elif hostile(0.03):
        argv += [rng.choice(("--warmup-steps", "--total-steps")), "3"]  # without --schedule
    for flag in ("--train", "--frozen"):
        if rng.random() < 0.15:
            for _ in range(rng.randint(1, 2)):
                pattern = rng.choice(PATTERNS)
                hostile(1.0 if pattern in ("nope*", "", "[", "*lora_*", "?2") else 0.0)
                argv += [flag, pattern]
    return argv


def train_case(rng: random.Random, hostile: Any) -> tuple[list[dict[str, Any]], list[str], str]:
    """(files, flags after the model path, model path) of one ``gradc train`` command."""
    from fuzz.harnesses.onnxmodel import ModelMutator
    from fuzz.onnx_training_models import TrainingModelGen
    from fuzz.onnx_transformer_models import TransformerModelGen

    if rng.random() < 0.6:
        model = TrainingModelGen(rng).build(rng.choice(("mlp", "cnn", "mlp")))
        classes_at = 1
    else:
        model = TransformerModelGen(rng).build()
        classes_at = -1
    data = model.SerializeToString()
    if hostile(0.1):
        data = ModelMutator(rng).mutate(data, rng.randint(1, 2))
    files: list[dict[str, Any]] = [{"name": "m.onnx", "kind": "bytes", "data": data}]
    scalar = model.graph.output and _is_loss(model.graph.output[0].name, model)
    loss = rng.choice(("cross_entropy", "cross_entropy", "mse", None)) if not scalar or \
        rng.random() < 0.1 else None
    argv = ["--data", "{dir}/data.npz", "-t", rng.choice(("reference", "numpy", "numpy",
                                                          "onnx", "c"))]
    if loss is not None:
        argv += ["--loss", loss]
    opt = rng.choice(("sgd", "adam", "adamw"))
    argv += ["--optimizer", opt, "--lr", rng.choice(("0.1", "0.01", "0"))]
    if opt != "sgd" and rng.random() < 0.8:
        argv += ["--eps", "1e-3"]  # float16 models refuse 1e-8 (it rounds to 0)
    spec = {"model": "m.onnx", "n": rng.choice((1, 2, 3, 4, 6)), "seed": rng.getrandbits(32),
            "defect": rng.choice(DEFECTS) if hostile(0.15) else None,
            "loss": loss or "cross_entropy", "explicit": loss is not None,
            "class_axis": classes_at}
    files.append({"name": "data.npz", "kind": "npz", "data": b"", "spec": spec})
    if rng.random() < 0.3:
        val = {**spec, "seed": rng.getrandbits(32), "n": rng.choice((1, 2, 5)),
               "defect": rng.choice(DEFECTS + ("folder", "missing")) if hostile(0.15) else None}
        files.append({"name": "val.npz", "kind": "npz", "data": b"", "spec": val})
        argv += ["--val-data", "{dir}/val.npz"]
    if classes_at == -1 and (loss == "cross_entropy" or (loss is None and not scalar)):
        argv += ["--class-axis", "-1"]
    argv += step_flags(rng, hostile, classes_at)
    if rng.random() < 0.3:
        argv += ["--epochs", rng.choice(("1", "2")) if not hostile(0.1) else
                 rng.choice(("0", "-1", "1.5"))]
    if rng.random() < 0.3:
        argv += ["--batch-size", rng.choice(("1", "2", "3")) if not hostile(0.1) else
                 rng.choice(("0", "-2", "x"))]
        hostile(1.0)  # a fixed-batch model refuses another size: the flag is at fault
    if rng.random() < 0.2:
        argv += ["--curve", rng.choice(("", "{dir}/curve.svg"))]
    if rng.random() < 0.15:
        argv += ["--checkpoint", "{dir}/ck.npz"]
    if hostile(0.05):
        argv += ["--resume", rng.choice(("{dir}/none.npz", "{dir}/data.npz"))]
    return files, argv, "{dir}/m.onnx"


def _is_loss(name: str, model: Any) -> bool:
    """Whether the model's output ``name`` is written by a loss node (then it is the loss)."""
    return any(name in n.output and n.op_type.endswith("Loss") for n in model.graph.node)


def write_data(path: str, base: str, spec: dict[str, Any]) -> None:
    """The data file of ``spec`` (see the module docstring) at ``path``."""
    import os

    import gradc

    defect = spec.get("defect")
    if defect == "folder":
        os.makedirs(path, exist_ok=True)
        return
    if defect == "missing":
        return
    if defect == "not_npz":
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 not a zip archive")
        return
    rng = random.Random(spec["seed"])
    nrng = np.random.default_rng(spec["seed"])
    try:
        g = gradc.from_onnx(os.path.join(base, spec["model"]))
    except Exception:  # noqa: BLE001 (the command reports the model; data is moot)
        np.savez(path, x=np.zeros((1, 1), np.float32))
        return
    firsts = [v.type.shape[0] for v in g.inputs if v.type.rank]
    static = [d for d in firsts if isinstance(d, int)]
    n = static[0] * max(1, spec["n"] // 2) if static else spec["n"]  # one example count
    arrays: dict[str, Any] = {}
    for v in g.inputs:
        if v.name == "rng_state":  # the dropout state: the step's own
            continue
        shape = _example_shape(v.type.shape, n)
        dt = v.type.dtype.numpy
        arrays[v.name] = (nrng.integers(-8, 9, shape) / 8.0).astype(dt) if dt.kind == "f" \
            else nrng.integers(0, 2, shape).astype(dt)
    first = g.outputs[0] if g.outputs else None
    if first is not None and first.type.rank and (spec.get("explicit") or
                                                  (first.type.size or 2) != 1):
        shape = _example_shape(first.type.shape, n)
        if spec["loss"] == "mse":
            arrays["target"] = (nrng.integers(-8, 9, shape) / 8.0).astype(
                first.type.dtype.numpy)
        else:
            axis = spec["class_axis"] % len(shape)
            classes = shape.pop(axis)
            arrays["labels"] = nrng.integers(0, max(1, classes), shape).astype(np.int64)
    _defect(arrays, defect, rng, nrng)
    if defect == "object_array":
        np.savez(path, **arrays, evil=np.array([{"a": 1}], dtype=object))
    else:
        np.savez(path, **arrays)


def _example_shape(shape: Any, n: int) -> list[int]:
    dims = [2 if isinstance(d, str) else int(d) for d in shape]
    if dims:
        dims[0] = n
    return dims


def _defect(arrays: dict[str, Any], defect: str | None, rng: random.Random,
            nrng: np.random.Generator) -> None:
    if not defect or not arrays:
        return
    name = rng.choice(sorted(arrays))
    a = arrays[name]
    if defect == "missing_array":
        del arrays[name]
    elif defect == "extra_array":
        arrays["unexpected"] = np.zeros((1,), np.float32)
    elif defect == "wrong_dtype":
        arrays[name] = a.astype(np.float64 if a.dtype != np.float64 else np.int32)
    elif defect == "wrong_shape" and a.ndim:
        arrays[name] = np.zeros(a.shape[:-1] + (a.shape[-1] + 1,), a.dtype)
    elif defect == "nan" and a.dtype.kind == "f" and a.size:
        a.reshape(-1)[rng.randrange(a.size)] = rng.choice((np.nan, np.inf, -np.inf))
    elif defect in ("bad_label", "float_labels") and "labels" in arrays:
        lab = arrays["labels"]
        if defect == "float_labels":
            arrays["labels"] = lab.astype(np.float32)
        elif lab.size:
            lab.reshape(-1)[rng.randrange(lab.size)] = rng.choice((-1, 99, 2 ** 62, -100))
    elif defect == "count_mismatch" and a.ndim:
        arrays[name] = np.concatenate([a, a[:1]])
    elif defect == "empty" and a.ndim:
        arrays[name] = a[:0]


__all__ = ["step_flags", "train_case", "write_data"]
