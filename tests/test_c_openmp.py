"""The C target's ``spin_count`` reaches GCC's OpenMP runtime (``backends/c/runtime.py``):
libgomp reads it once, when the first program loads it, so each case runs in a fresh process,
and libgomp itself reports what it read (``OMP_DISPLAY_ENV=verbose``). No timing here: the
measurements that chose the default are in the runtime's docstring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradc
from gradc.backends.c import runtime

CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    if sys.argv[1] == "torch":
        import torch  # brings its own libgomp (the same soname) before gradc's first program
    import gradc
    from gradc.backends.c import runtime

    def program(**options):
        g = gradc.Graph("twice")
        x = g.input("x", "float32", (8,))
        with g:
            y = gradc.ops.add(x, x)
        g.output(y, "y")
        exe = gradc.compile(g, "c", **options)
        assert exe(x=np.ones(8, np.float32))["y"].tolist() == [2.0] * 8
        return exe

    first = json.loads(sys.argv[2])
    program(**first)
    out = {"state": runtime.openmp_state(), "env": os.environ.get("GOMP_SPINCOUNT"),
           "later": {}}
    for spin in json.loads(sys.argv[3]):
        try:
            program(spin_count=spin)
            out["later"][str(spin)] = "ok"
        except gradc.GradcError as e:
            out["later"][str(spin)] = str(e)
    print(json.dumps(out))
""")


def child(mode: str, first: dict, later: list, **env: str) -> tuple[dict, str]:
    """Run CHILD; returns its report and libgomp's own (stderr)."""
    e = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    e.update(OMP_DISPLAY_ENV="verbose", **env)
    p = subprocess.run([sys.executable, "-c", CHILD, mode, json.dumps(first), json.dumps(later)],
                       capture_output=True, text=True, env=e, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def test_spin_count_is_what_libgomp_reads_and_is_set_for_that_load_only():
    out, libgomp = child("plain", {"spin_count": 123}, [None, 123, 7])
    assert "GOMP_SPINCOUNT = '123'" in libgomp
    assert out["state"] == {"spin_count": 123, "by": "gradc"}
    assert out["env"] is None  # the environment is as it was once libgomp has read it
    assert out["later"]["None"] == "ok" and out["later"]["123"] == "ok"
    assert "spin_count=7" in out["later"]["7"] and "spin count 123" in out["later"]["7"]


def test_default_spin_count_unless_the_environment_sets_one():
    out, libgomp = child("plain", {}, [])
    assert f"GOMP_SPINCOUNT = '{runtime.DEFAULT_SPIN_COUNT}'" in libgomp
    assert out["state"] == {"spin_count": runtime.DEFAULT_SPIN_COUNT, "by": "gradc"}
    out, libgomp = child("plain", {}, [55, 0], GOMP_SPINCOUNT="55")
    assert "GOMP_SPINCOUNT = '55'" in libgomp and out["env"] == "55"
    assert out["state"] == {"spin_count": 55, "by": "the environment"}
    assert out["later"]["55"] == "ok" and "the environment" in out["later"]["0"]
    out, libgomp = child("plain", {}, [], OMP_WAIT_POLICY="passive")
    assert "GOMP_SPINCOUNT = '0'" in libgomp  # libgomp's own passive policy, left alone
    out, libgomp = child("plain", {"spin_count": 0}, [], GOMP_SPINCOUNT="99")
    assert "GOMP_SPINCOUNT = '0'" in libgomp and out["env"] == "99"  # given beats environment


def test_a_libgomp_loaded_by_another_library_keeps_its_settings():
    pytest.importorskip("torch")
    out, libgomp = child("torch", {}, [5])
    assert out["state"] == {"spin_count": None, "by": "another library"}
    assert "GOMP_SPINCOUNT = '300000'" in libgomp  # libgomp's default, read at torch's import
    assert "another library" in out["later"]["5"] and "PyTorch" in out["later"]["5"]


def test_gradc_train_passes_spin_count_down_before_loading_the_model(tmp_path):
    from test_trainer_sizes import data, drop_bn_mlp  # lazy: a sibling test module
    import onnx  # lazy: only this test writes a model file
    model, d = tmp_path / "m.onnx", tmp_path / "d.npz"
    onnx.save(drop_bn_mlp(), model)
    np.savez(d, **data())
    e = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    e["OMP_DISPLAY_ENV"] = "verbose"
    cmd = [sys.executable, "-m", "gradc", "train", str(model), "--data", str(d), "-o",
           str(tmp_path / "t.onnx"), "--loss", "cross_entropy", "--batch-size", "8",
           "--curve", ""]
    p = subprocess.run([*cmd, "--spin-count", "0"], capture_output=True, text=True, env=e,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "GOMP_SPINCOUNT = '0'" in p.stderr
    p = subprocess.run([*cmd, "--spin-count", "0", "-t", "numpy"], capture_output=True,
                       text=True, env=e, timeout=600)
    assert p.returncode == 2 and "--spin-count: only for -t c" in p.stderr


@pytest.mark.parametrize("bad", [-1, True, 1.5, "0", 2 ** 63])
def test_bad_spin_count_names_the_option(bad):
    g = gradc.Graph("one")
    x = g.input("x", "float32", (2,))
    with g:
        y = gradc.ops.relu(x)
    g.output(y, "y")
    with pytest.raises(gradc.GradcError, match="spin_count: expected an int"):
        gradc.compile(g, "c", spin_count=bad)
