"""Comparisons of gradc against PyTorch and onnxruntime on the transformer zoo (test-only).

``Case`` holds one model in one export form, made once: the PyTorch model (attention dropout
off, as gradc imports it: SPEC-transformers §27.5), its inputs and labels, the ONNX bytes and
the imported graph. The helpers compute

- the forward on onnxruntime (the exported file as it is) and on a gradc target;
- PyTorch's loss and parameter gradients (cross entropy over the last axis with
  ``ignore_index=-100``, as ``transformer_models.loss_fn``);
- gradc's loss and parameter gradients from the imported graph with the same loss appended
  (``loss_graph``: ``softmax_cross_entropy(logits, labels, ignore_index=-100, class_axis=-1)``
  as a second output, differentiated with a zero cotangent for the logits, which adds exact
  zeros);
- ``param_names``: which PyTorch parameter each gradc parameter is (by name; a tied or renamed
  weight by its value), and which gradc parameters are buffers (``inv_freq``), frozen in
  training.

``rel_diff`` is the error measure of every table: the largest difference over an array divided
by the largest magnitude of the expected array.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

import gradc
import transformer_models as tm

logging.getLogger("torch.onnx").setLevel(logging.ERROR)


def rel_diff(got: np.ndarray, want: np.ndarray, floor: float = 0.0) -> float:
    """max |got - want| / max(max |want|, floor) (0 when both are 0)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, floor)
    err = float(np.abs(got - want).max()) if want.size else 0.0
    return err / scale if scale else err


GRAD_FLOOR = 1e-3


def grad_diffs(got: dict[str, np.ndarray], want: dict[str, np.ndarray],
               mapping: dict[str, str]) -> dict[str, float]:
    """Each gradc parameter's gradient against PyTorch's (``mapping``: gradc name -> PyTorch
    name), relative to the larger of its own largest magnitude and ``GRAD_FLOOR`` times the
    largest gradient of the model: a gradient that is 0 in exact arithmetic (the key bias of
    attention: softmax ignores a constant added to a row) holds rounding noise in both, and
    its difference is measured against the model's gradient scale instead."""
    top = max(float(np.abs(want[t]).max()) for t in mapping.values())
    return {g: rel_diff(got[g], want[t], GRAD_FLOOR * top) for g, t in mapping.items()}


@dataclass
class Case:
    """One model in one export form, built once (see the module docstring)."""

    name: str
    form: str
    dtype: torch.dtype
    symbolic_batch: bool
    model: Any = None
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    labels: torch.Tensor | None = None
    blob: bytes = b""
    graph: gradc.Graph | None = None
    opset: int | None = None

    @property
    def np_inputs(self) -> dict[str, np.ndarray]:
        return tm.numpy_inputs(self.inputs)


def make_case(name: str, form: str, dtype: torch.dtype = torch.float32,
              symbolic_batch: bool = False, opset: int | None = None) -> Case:
    """Build, export and import one case (``graph`` stays None when the import fails, the
    error is raised)."""
    c = Case(name, form, dtype, symbolic_batch, opset=opset)
    c.model = tm.make(name, dtype=dtype)
    c.inputs = tm.inputs(name, dtype=dtype)
    c.labels = tm.labels(name)
    export_model = c.model
    if opset is not None and opset >= 23:  # SDPA exports as Attention only without dropout
        tm.attention_dropout_off(export_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c.blob = tm.export(export_model, form, c.inputs, symbolic_batch, opset)
    tm.attention_dropout_off(c.model)
    c.graph = gradc.from_onnx(c.blob)
    return c


def ort_forward(c: Case) -> np.ndarray:
    """The exported file's logits in stock onnxruntime."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(c.blob, so, providers=["CPUExecutionProvider"])
    return sess.run(["logits"], c.np_inputs)[0]


def feeds(g: gradc.Graph, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays the graph takes: the given ones, and a zero ``rng_state`` if it has one."""
    out = dict(arrays)
    for v in g.inputs:
        if v.name == "rng_state":
            out[v.name] = np.zeros(6, np.uint32)
    return out


def gradc_forward(c: Case, target: str) -> np.ndarray:
    """The imported graph's logits on a gradc target."""
    assert c.graph is not None
    exe = gradc.compile(c.graph, target=target)
    return exe(**feeds(c.graph, c.np_inputs))["logits"]


def torch_step(c: Case) -> tuple[float, dict[str, np.ndarray]]:
    """PyTorch's loss and parameter gradients (by parameter name) on the case's batch."""
    c.model.zero_grad()
    logits = c.model(*c.inputs.values())
    loss = tm.loss_fn(logits, c.labels)
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in c.model.named_parameters()
             if p.grad is not None}
    return float(loss.detach()), grads


def loss_graph(g: gradc.Graph, labels_shape: tuple) -> gradc.Graph:
    """The imported graph with ``loss`` (cross entropy over the last axis, ignore_index
    -100) as a second output, and its ``labels`` input."""
    out = gradc.parse(str(g), parameters={p.name: p.value for p in g.parameters})
    logits = next(v for v in out.outputs if v.name == "logits")
    with out:
        labels = out.input("labels", "int64", labels_shape)
        loss = gradc.ops.softmax_cross_entropy(logits, labels, ignore_index=-100,
                                               class_axis=-1)
    out.output(loss, "loss")
    return out


def gradc_step(c: Case, target: str, wrt: list[str]) -> tuple[float, dict[str, np.ndarray]]:
    """gradc's loss and the gradients of the parameters ``wrt`` on a target."""
    assert c.graph is not None and c.labels is not None
    lg = loss_graph(c.graph, tuple(c.labels.shape))
    gg = gradc.grad(lg, wrt)
    args = feeds(gg, {**c.np_inputs, "labels": c.labels.numpy()})
    for v in gg.inputs:
        if v.name.startswith("grad_"):
            args[v.name] = (np.ones if v.name == "grad_loss" else np.zeros)(
                v.type.shape, v.type.dtype.numpy)
    out = gradc.compile(gg, target=target)(**args)
    return float(out["loss"]), {n: out[f"grad_{n}"] for n in wrt}


def param_names(c: Case) -> tuple[dict[str, str], list[str]]:
    """({gradc parameter: trainable PyTorch parameter}, [the other float gradc parameters:
    buffers such as ``inv_freq``, and parameters PyTorch does not train, as LoRA's base])."""
    assert c.graph is not None
    torch_params = {n: p.detach().numpy() for n, p in c.model.named_parameters()
                    if p.requires_grad}
    mapping: dict[str, str] = {}
    buffers: list[str] = []
    for p in c.graph.parameters:
        if not p.type.dtype.is_float:
            continue
        if p.name in torch_params:
            mapping[p.name] = p.name
            continue
        same = [n for n, a in torch_params.items()
                if a.shape == p.value.shape and np.array_equal(a, p.value)]
        if len(same) == 1:
            mapping[p.name] = same[0]
        else:
            buffers.append(p.name)
    return mapping, buffers


__all__ = ["Case", "make_case", "ort_forward", "gradc_forward", "torch_step", "gradc_step",
           "param_names", "rel_diff", "grad_diffs", "loss_graph", "feeds"]
