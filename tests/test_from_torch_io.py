"""gradc.from_torch's interface (issue 27): names, parameters, state, symbols, .pt2 files, the
command line, Trainer.to_torch, errors, and PyTorch as an optional extra."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradc
from gradc.cli import main as gradc_main

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from torch_modules import check, rand  # noqa: E402  (needs torch)


class Net(nn.Module):
    """Conv, batch norm, a tied linear pair, buffers of every kind; two named inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.enc = nn.Linear(4, 6, bias=False)
        self.dec = nn.Linear(6, 4, bias=False)
        self.register_buffer("scale", torch.full((4,), 0.5, dtype=torch.float64))
        self.register_buffer("mask", torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64),
                             persistent=False)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, image, bias):
        self.steps += 1
        h = torch.relu(self.bn(self.conv(image))).mean((2, 3))
        code = self.enc(h * self.scale * self.mask)
        out = torch.nn.functional.linear(code, self.enc.weight.t()) + bias
        return {"out": out, "parts": (code, self.dec(code))}


def _net() -> Net:
    torch.manual_seed(0)
    return Net().double().train()


def test_names_of_inputs_outputs_parameters_and_state():
    m = _net()
    g = check(m, rand(2, 3, 5, 5), rand(4, seed=1))
    assert [v.name for v in g.inputs] == ["image", "bias"]
    assert [v.name for v in g.outputs] == [
        "out", "parts.0", "parts.1", "steps.next", "bn.running_mean.next",
        "bn.running_var.next", "bn.num_batches_tracked.next"]
    params = {p.name: p for p in g.parameters}
    # trained parameters and the state the forward updates, by state_dict name; the other
    # buffers (a persistent float one, a non-persistent one) are constants
    assert set(params) == {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "enc.weight",
                           "dec.weight", "bn.running_mean", "bn.running_var",
                           "bn.num_batches_tracked", "steps"}
    assert params["bn.num_batches_tracked"].type.dtype == gradc.DType.int64
    assert params["steps"].type.shape == ()


def test_output_names_of_a_tensor_a_tuple_and_a_dict():
    x = rand(2, 3)
    one = gradc.from_torch(_Lambda(lambda x: x * 2), (x,))
    assert [v.name for v in one.outputs] == ["output"]
    pair = gradc.from_torch(_Lambda(lambda x: (x * 2, x + 1)), (x,))
    assert [v.name for v in pair.outputs] == ["output_0", "output_1"]
    named = gradc.from_torch(_Lambda(lambda x: {"a": x * 2, "b": [x + 1, x - 1]}), (x,))
    assert [v.name for v in named.outputs] == ["a", "b.0", "b.1"]


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_tied_weight_is_one_parameter_whose_gradient_sums_both_uses():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)))

    torch.manual_seed(0)
    g = check(Tied().double(), rand(3, 4))
    assert [p.name for p in g.parameters] == ["a.weight"]


def test_eval_mode_has_no_state_and_the_module_is_left_as_it_was():
    m = _net().eval()
    before = copy.deepcopy(m.state_dict())
    g = check(m, rand(2, 3, 5, 5), rand(4, seed=1))
    assert not any(o.name.endswith(".next") for o in g.outputs[:-1])
    assert "bn.running_mean" not in {p.name for p in g.parameters}
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_dim_names_become_symbols_and_any_batch_runs():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                      nn.Linear(4 * 3 * 3, 2)).double()
    batch = torch.export.Dim("batch")
    g = gradc.from_torch(m, (rand(2, 3, 5, 5),), dynamic_shapes={"input": {0: batch}})
    assert g.inputs[0].type.shape == ("batch", 3, 5, 5)
    exe = gradc.compile(g, target="reference")
    for n in (3, 5):
        x = rand(n, 3, 5, 5, seed=n)
        got = exe(input=x.numpy())
        ref = copy.deepcopy(m)
        want = ref(x).detach().numpy()
        np.testing.assert_allclose(got["output"], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["1.running_mean.next"],
                                   ref.state_dict()["1.running_mean"].numpy(), rtol=1e-12)


def test_a_size_computed_from_symbols_is_refused():
    class Merge(nn.Module):
        def forward(self, x):
            return x.reshape(-1) * 2

    batch = torch.export.Dim("batch")
    with pytest.raises(gradc.UnsupportedError, match=r"the size 3\*batch|3\*s\d+|computed from "
                       r"symbolic sizes"):
        gradc.from_torch(Merge(), (rand(2, 3),), dynamic_shapes={"x": {0: batch}})


def test_training_step_and_trainer_take_the_graph(tmp_path):
    m = _net()
    g = gradc.from_torch(m, (rand(2, 3, 5, 5), rand(4, seed=1)))
    step = gradc.training_step(g, gradc.optim.SGD(0.1), loss="mse")
    names = [p.name for p in step.parameters]
    assert "bn.num_batches_tracked" in names and "steps" in names
    tr = gradc.Trainer(g, gradc.optim.SGD(2**-4), loss="mse", target="reference")
    x, b, t = rand(2, 3, 5, 5), rand(4, seed=1), rand(2, 4, seed=2)
    for _ in range(2):
        tr.step(image=x.numpy(), bias=b.numpy(), target=t.numpy())
    assert int(tr.parameters["bn.num_batches_tracked"]) == 2
    assert int(tr.parameters["steps"]) == 2
    back = tr.to_torch(_net())
    assert int(back.steps) == 2 and int(back.bn.num_batches_tracked) == 2
    # The inference form (batch norm with the running statistics) runs in onnxruntime as the
    # copied-back module does in eval mode.
    import onnxruntime as ort
    tr.export(tmp_path / "net.onnx")
    sess = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()],
                   sess.run(None, {"image": x.numpy(), "bias": b.numpy()})))
    with torch.no_grad():
        want = back.eval()(x, b)
    np.testing.assert_allclose(got["out"], want["out"].numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["parts.1"], want["parts"][1].numpy(), rtol=1e-10, atol=1e-12)


def test_to_torch_refuses_a_module_that_does_not_fit():
    g = gradc.from_torch(nn.Linear(3, 2).double(), (rand(1, 3),))
    tr = gradc.Trainer(g, gradc.optim.SGD(0.1), loss="mse", target="reference")
    with pytest.raises(gradc.InputError, match=r"no parameter or buffer named 'weight'"):
        tr.to_torch(nn.Sequential(nn.Linear(3, 2).double()))
    with pytest.raises(gradc.InputError, match=r"'weight': the module's tensor is float32 "
                       r"\(2, 3\), the trained one float64 \(2, 3\)"):
        tr.to_torch(nn.Linear(3, 2))
    with pytest.raises(gradc.InputError, match="expected a torch.nn.Module"):
        tr.to_torch({"weight": 1})


def test_bad_arguments_and_programs_torch_cannot_capture():
    with pytest.raises(gradc.VerifyError, match="expected a torch.nn.Module"):
        gradc.from_torch(lambda x: x, (rand(2),))

    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(gradc.UnsupportedError, match="torch.export could not capture "
                       "DataDependent"):
        gradc.from_torch(DataDependent(), (rand(2),))

    class ChangesItsInput(nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    with pytest.raises(gradc.UnsupportedError, match=r"changes 'x' in place"):
        gradc.from_torch(ChangesItsInput(), (rand(2),))


# -- .pt2 files and the command line ---------------------------------------------------------


@pytest.fixture(scope="module")
def pt2(tmp_path_factory):
    """A .pt2 of the training-mode net (symbolic batch), its data file, and the module."""
    folder = tmp_path_factory.mktemp("pt2")
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                      nn.Linear(4 * 3 * 3, 3)).train()
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    program = torch.export.export(m, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, folder / "net.pt2")
    np.savez(folder / "data.npz", input=x.numpy(), labels=np.array([0, 1, 2, 1]))
    return folder, m, x


def test_pt2_file_gives_the_graph_of_from_torch(pt2):
    folder, m, x = pt2
    from gradc.cli import load_graph
    g = load_graph(str(folder / "net.pt2"))
    assert g.name == "net"
    symbol = g.inputs[0].type.shape[0]
    assert isinstance(symbol, str)  # torch's own name: a .pt2 keeps no Dim names
    want = gradc.from_torch(m, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert want.inputs[0].type.shape == ("batch", 3, 5, 5)
    got = gradc.compile(g, target="reference")(input=x.numpy())
    ref = gradc.compile(want, target="reference")(input=x.numpy())
    assert [o.name for o in g.outputs] == [o.name for o in want.outputs]
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])


def test_command_line_takes_pt2_files(pt2, tmp_path, capsys):
    folder, _, _ = pt2
    src = str(folder / "net.pt2")
    assert gradc_main(["show", src, "-o", str(tmp_path / "net.html")]) == 0
    assert gradc_main(["train-step", src, "-o", str(tmp_path / "step.onnx"), "--loss",
                       "cross_entropy", "--optimizer", "sgd", "--lr", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "state: 9 tensors (" in out and "1.num_batches_tracked" in out
    assert gradc_main(["train", src, "--data", str(folder / "data.npz"), "-o",
                       str(tmp_path / "trained.onnx"), "--loss", "cross_entropy",
                       "--batch-size", "2", "--epochs", "1", "-t", "reference"]) == 0
    assert (tmp_path / "trained.onnx").exists()


def test_bad_pt2_files_exit_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip archive")
    assert gradc_main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gradc: error: {bad}: not a readable torch.export program (.pt2)")
    assert len(err.strip().splitlines()) == 1
    assert gradc_main(["show", str(tmp_path / "missing.pt2")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_pt2_with_an_unsupported_operator_exits_2(tmp_path, capsys):
    class Cumsum(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 0)

    path = tmp_path / "cumsum.pt2"
    torch.export.save(torch.export.export(Cumsum(), (torch.ones(3),)), path)
    assert gradc_main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert "aten.cumsum.default" in err and len(err.strip().splitlines()) == 1


# -- PyTorch is an optional extra ------------------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_import_gradc_never_loads_torch():
    r = _python("""
        import sys
        import gradc, gradc.cli, gradc.trainer, gradc.torch_frontend
        gradc.from_torch, gradc.Trainer
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        print("ok")
    """)
    assert r.stdout.strip() == "ok", r.stderr


def test_without_torch_from_torch_says_how_to_install_it(tmp_path):
    (tmp_path / "m.pt2").write_bytes(b"anything")
    r = _python(f"""
        import sys
        sys.modules["torch"] = None  # as if PyTorch were not installed
        import gradc
        from gradc.cli import main
        try:
            gradc.from_torch(object(), ())
        except gradc.UnsupportedError as e:
            print(e)
        print(main(["show", {str(tmp_path / "m.pt2")!r}]))
    """)
    assert r.stdout.split("\n")[:2] == ["from_torch: PyTorch is not installed (pip install "
                                        "'gradc[torch]')", "2"], r.stderr
    assert r.stderr.strip().endswith("m.pt2: from_torch: PyTorch is not installed (pip install "
                                     "'gradc[torch]')")


def test_names_that_clash_are_refused_together():
    class Clash(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(3))

        def forward(self, output):
            return {"weight": output * self.weight, "output": output + 1}

    with pytest.raises(gradc.UnsupportedError) as e:
        gradc.from_torch(Clash(), (torch.ones(3),))
    assert str(e.value).splitlines()[1:] == [
        "output 'weight': the name of a parameter or of the dropout state (rename the output's "
        "key)",
        "input 'output': its name is also the name of an output or a parameter (rename the "
        "forward's argument)"]


def test_frozen_parameters_are_constants():
    """A parameter with requires_grad=False is not trained by torch.optim: a constant here."""
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    m[0].requires_grad_(False)
    g = check(m, rand(5, 3))
    assert [p.name for p in g.parameters] == ["2.weight", "2.bias"]
