"""Real models (issue 11): torchvision's resnet18, mobilenet_v2 and squeezenet1_0, a UNet and an
MLP, exported from PyTorch four ways, imported by gradc and differentiated with respect to
their weights.

The models are the real architectures at a fraction of their width (tests/real_models.py),
batch 2, 32x32 (the MLP 3x32x32), so that the suite stays a few minutes on 2 cores. Dropout
probabilities are set to 0 where numbers are compared with PyTorch: gradc draws its own random
numbers (SPEC-training.md §20).

- Every model and export form imports, and its forward result on the reference target equals
  onnxruntime's on the exported file (training-mode batch normalization for the TorchScript
  training forms) within a summation tolerance.
- The weight gradients of the training form with the loss (``gradc.grad(wrt="parameters")``)
  match torch.autograd on the reference target, in float64 (with a batch of 2 the last batch
  norms see 2 to 8 values each, which amplifies float32 rounding by orders of magnitude, so
  only float64 tells a wrong gradient from rounding); numpy and c reproduce the reference bit
  for bit in float32; stock onnxruntime runs the exported training graph and agrees in float64.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest

import gradc

torch = pytest.importorskip("torch")
import real_models as rm  # noqa: E402  (needs torch)

logging.getLogger("torch.onnx").setLevel(logging.ERROR)

MODELS = {"resnet18": 8, "mobilenet_v2": 8, "squeezenet1_0": 8, "unet": 4, "mlp": 1}
SIZE = 32


def _has_onnxscript() -> bool:
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


_CACHE: dict[tuple[str, str, str], tuple] = {}


def exported(name: str, form: str, dtype: str = "float32"):
    """(model, x, labels, onnx bytes), made once per session.

    In float64 every batch norm's epsilon is 2**-16, a float32 value: gradc rounds epsilon to
    float32 (SPEC-training §9.3) and PyTorch's double model keeps 1e-5; with this batch of 2
    the last layers normalize over 2 to 8 values, where that difference would dominate.
    """
    if form.startswith("dynamo") and not _has_onnxscript():
        pytest.skip("torch's default ONNX exporter needs onnxscript")
    key = (name, form, dtype)
    if key not in _CACHE:
        model, shape = rm.make(name, MODELS[name], size=SIZE)
        rm.no_dropout(model)
        if dtype == "float64":
            model = model.double()
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.eps = 2.0 ** -16
        x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(3),
                        dtype=getattr(torch, dtype))
        labels = rm.labels_for(name, model, x)
        _CACHE[key] = (model, x, labels, rm.export(model, form, x, labels))
    return _CACHE[key]


def feeds(model_bytes: bytes, x, labels) -> dict[str, np.ndarray]:
    """The exported model's graph inputs (those without initializers) with their arrays."""
    m = onnx.load_from_string(model_bytes)
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    arrays = {"x": x.numpy(), "target": labels.numpy()}
    return {n: arrays[n] for n in names}


def gradc_feeds(g: gradc.Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The exported model's feeds, plus the dropout state the importer adds (SPEC-training
    §21) where the model has a training-mode Dropout (probability 0 here)."""
    names = {v.name for v in g.inputs}
    extra = {"rng_state": np.array([0, 0, 0, 0, 7, 0], np.uint32)} if "rng_state" in names else {}
    return {**inputs, **extra}


def close(got: np.ndarray, want: np.ndarray, what: str, rel: float = 2e-3) -> None:
    """Equal within a summation tolerance scaled by the largest magnitude."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rel, atol=rel * scale + 1e-6, err_msg=what)


@pytest.mark.parametrize("form", rm.FORMS)
@pytest.mark.parametrize("name", MODELS)
def test_every_model_and_form_imports_and_runs_as_onnxruntime(name, form):
    import onnxruntime as ort
    _, x, labels, blob = exported(name, form)
    g = gradc.from_onnx(blob)
    assert g.parameters, "the weights are parameters"
    inputs = feeds(blob, x, labels)
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    want = sess.run(None, inputs)
    got = gradc.compile(g, target="reference")(**gradc_feeds(g, inputs))
    for o, w in zip(g.outputs, want):
        close(got[o.name], w, f"{name}/{form}: {o.name}")


def _gradients(name: str, dtype: str, target: str):
    """(gradc's results on ``target``, the reference's, the training graph)."""
    _, x, labels, blob = exported(name, "ts_train_loss", dtype)
    g = gradc.from_onnx(blob)
    train = gradc.grad(g, wrt="parameters")
    inputs = gradc_feeds(g, feeds(blob, x, labels))
    loss = g.outputs[0]
    inputs["grad_" + loss.name] = np.ones(loss.type.shape, loss.type.dtype.numpy)
    ref = gradc.compile(train, target="reference")(**inputs)
    got = ref if target == "reference" else gradc.compile(train, target=target)(**inputs)
    return got, ref, train


def _close_to(got: dict, want: dict, rel: float, what: str) -> None:
    """Each gradient within ``rel`` of the largest gradient of the model: a parameter whose
    gradient is 0 in exact arithmetic (a bias before a batch norm) holds rounding noise."""
    scale = max(float(np.abs(w).max()) for w in want.values())
    for n, w in want.items():
        np.testing.assert_allclose(got[n], w, rtol=rel, atol=rel * scale, err_msg=f"{what}: {n}")


@pytest.mark.parametrize("name", MODELS)
def test_weight_gradients_match_torch_autograd(name):
    """Every weight's gradient, in float64, against torch.autograd of the same model."""
    model, x, labels, _ = exported(name, "ts_train_loss", "float64")
    model.train()
    model.zero_grad()
    rm.WithLoss(model)(x, labels).backward()
    want = {f"grad_model.{n}": p.grad.numpy() for n, p in model.named_parameters()}
    got, _, _ = _gradients(name, "float64", "reference")
    assert set(want) <= set(got), sorted(set(want) - set(got))
    _close_to(got, want, 1e-9, name)


@pytest.mark.parametrize("target", ["numpy", "c"])
@pytest.mark.parametrize("name", MODELS)
def test_weight_gradients_are_bit_exact_on_numpy_and_c(name, target):
    got, ref, train = _gradients(name, "float32", target)
    for o in train.outputs:
        np.testing.assert_array_equal(got[o.name], ref[o.name], f"{name}/{target}: {o.name}")


@pytest.mark.parametrize("name", MODELS)
def test_weight_gradients_in_onnxruntime(name):
    """Stock onnxruntime runs the exported training graph; float64, where summing in another
    order stays far below the test's tolerance."""
    got, ref, train = _gradients(name, "float64", "onnx")
    _close_to({o.name: got[o.name] for o in train.outputs},
              {o.name: ref[o.name] for o in train.outputs}, 1e-9, f"{name}/onnx")


@pytest.mark.parametrize("name", MODELS)
def test_training_graphs_export_as_standard_onnx(name):
    """grad(wrt="all") of each model: to_onnx passes the full checker with default-domain
    operators only (no com.microsoft training ops) and stock onnxruntime runs it as the
    reference does."""
    _, x, labels, blob = exported(name, "ts_train_loss", "float64")
    g = gradc.from_onnx(blob)
    train = gradc.grad(g, wrt="all")
    assert [o.name for o in train.outputs][-len(train.parameters):] == \
        [f"grad_{p.name}" for p in train.parameters]
    model = gradc.to_onnx(train)
    onnx.checker.check_model(model, full_check=True)
    assert {n.domain for n in model.graph.node} <= {""}, "default-domain operators only"
    assert {o.domain for o in model.opset_import} == {""}
