"""Replays every crash case the fuzzer stored (fuzz/regressions), and tests the fuzzer itself.

Each stored case runs in a worker child process under the fuzzer's limits (address space,
timeout) and must end in success or a ``GradcError`` (for the command line: an exit status other
than 70, no traceback, the contract of ``fuzz/harnesses/cli.py``). A case that still fails is a
bug of gradc that is not fixed yet. With no stored case the replay test is skipped.
"""

from __future__ import annotations

import math
import os
import random
import sys
import threading

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from fuzz import codec, store  # noqa: E402
from fuzz.common import Finding, Result, fault_frames, innermost_frame  # noqa: E402
from fuzz.minimize import Budget, ddmin, minimize  # noqa: E402
from fuzz.supervisor import Worker  # noqa: E402
from fuzz.worker import classify  # noqa: E402

REPLAY_TIMEOUT_S = 5.0
CASES = store.stored_cases()


@pytest.fixture(scope="module")
def replayed() -> dict[str, Result]:
    """Every stored case replayed once, two workers side by side: path -> result."""
    if not CASES:
        return {}
    jobs = max(1, min(2, os.cpu_count() or 1, len(CASES)))
    todo = list(CASES)
    results: dict[str, Result] = {}
    lock = threading.Lock()

    def run() -> None:
        with Worker(timeout=REPLAY_TIMEOUT_S) as w:
            while True:
                with lock:
                    if not todo:
                        return
                    case = todo.pop(0)
                r = w.run(case.harness, case.payload)
                with lock:
                    results[case.path] = r

    threads = [threading.Thread(target=run) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _case_params() -> list[object]:
    if not CASES:
        return [pytest.param(None, marks=pytest.mark.skip(reason="fuzz/regressions is empty"))]
    return [pytest.param(c, id=os.path.relpath(c.path, os.path.join(REPO, "fuzz", "regressions")))
            for c in CASES]


@pytest.mark.parametrize("case", _case_params())
def test_stored_case_does_not_crash(case: store.StoredCase,
                                    replayed: dict[str, Result]) -> None:
    r = replayed[case.path]
    assert r.status != "crash", (
        f"{os.path.relpath(case.path, REPO)} still fails: {' | '.join(r.key or ())}\n"
        f"{r.message}\n{r.detail[-2000:]}")


# -- the fuzzer itself --------------------------------------------------------------------------
def _raise_from(path: str) -> BaseException:
    """An exception raised by a function whose code claims to live at ``path``."""
    code = compile("def boom():\n    raise ValueError('synthetic')\n", path, "exec")
    ns: dict[str, object] = {}
    exec(code, ns)
    try:
        ns["boom"]()  # type: ignore[operator]
    except ValueError as e:
        return e
    raise AssertionError("boom did not raise")


def test_class_key_names_exception_type_and_innermost_gradc_frame() -> None:
    e = _raise_from(os.path.join(REPO, "passes", "fuzz_synthetic.py"))
    r = classify("ir", e)
    assert r.status == "crash"
    assert r.key == ("ir", "ValueError", "passes/fuzz_synthetic.py:boom")
    outside = classify("call", _raise_from("/elsewhere/thing.py"))
    assert outside.key == ("call", "ValueError", "thing.py:boom")


def test_refusals_and_findings_are_classified() -> None:
    from gradc.errors import ParseError

    assert classify("ir", ParseError("bad", 1, 2)).status == "refused"
    r = classify("ir", Finding("mismatch", "c:float32", "differs"))
    assert r.status == "crash" and r.key == ("ir", "mismatch", "c:float32")


def test_fault_dump_is_keyed_by_innermost_gradc_frame() -> None:
    dump = (f"Timeout (0:00:15)!\nThread 0x01 (most recent call first):\n"
            f'  File "{REPO}/ir/ops/pooling.py", line 40 in window_argmax\n'
            f'  File "{REPO}/compiler/api.py", line 10 in compile\n'
            f'  File "{REPO}/fuzz/worker.py", line 5 in execute\n')
    assert innermost_frame(fault_frames(dump)) == "ir/ops/pooling.py:window_argmax"


def test_ddmin_keeps_the_predicate() -> None:
    out = ddmin(list(range(100)), lambda xs: 17 in xs and 42 in xs)
    assert out == [17, 42]


def test_minimizer_shrinks_a_text_case() -> None:
    from fuzz.harnesses import ir

    lines = ["graph g(%x: f32[2]) {"] + [f"  %{i} = relu(%x) : f32[2]" for i in range(30)]
    payload = {"kind": "text", "text": "\n".join(lines + ["  return %7", "}"]), "seed": 0,
               "c": True, "grad": True, "onnx_export": True}
    small = minimize(ir, payload, lambda p: "%7 = relu" in p["text"], Budget(tests=400))
    assert "%7 = relu" in small["text"]
    assert len(small["text"]) < 20
    assert small["c"] is False


def test_codec_round_trips_payloads() -> None:
    payload = {"b": b"\xff\x00", "t": "x\ud800", "big": 10 ** 5000, "nan": math.nan,
               "tup": (1, (2.5, "a")), "arr": np.arange(6, dtype=np.float16).reshape(2, 3),
               "text": "graph".encode()}
    back = codec.loads(codec.dumps(payload))
    assert back["b"] == payload["b"] and back["t"] == payload["t"]
    assert back["big"] == payload["big"] and math.isnan(back["nan"])
    assert back["tup"] == payload["tup"] and back["text"] == b"graph"
    assert back["arr"].dtype == np.float16 and (back["arr"] == payload["arr"]).all()


def test_store_saves_and_loads_a_case(tmp_path: object) -> None:
    root = str(tmp_path)
    payload = {"kind": "text", "text": "graph g() {\n}", "seed": 3, "c": False, "grad": True,
               "onnx_export": True}
    key = ("ir", "ValueError", "ir/parser.py:parse")
    path = store.save("ir", key, payload, "msg", 1, root=root)
    assert path.endswith(".ir") and os.path.exists(path)
    case = store.load_case(path)
    assert case.key == key and case.payload == payload
    assert store.stored_keys(root) == {key: path}


def test_worker_survives_hang_crash_and_allocation_bomb() -> None:
    with Worker(timeout=2.0) as w:
        r = w.run("selftest", {"action": "sleep"})
        assert r.key == ("selftest", "timeout", "selftest.py:_sleep_forever")
        r = w.run("selftest", {"action": "alloc"})
        assert r.status == "crash" and r.key is not None and r.key[1] == "MemoryError"
        r = w.run("selftest", {"action": "abort"})
        assert r.key == ("selftest", "signal 11", "selftest.py:<lambda>")
        assert w.run("selftest", {"action": "ok"}).status == "ok"
        assert w.run("selftest", {"action": "refuse"}).status == "refused"
        payload, r = w.fuzz("selftest", random.Random(1).getrandbits(32))
        assert payload is not None and r.status in ("ok", "refused")


def test_a_timeout_is_keyed_by_the_thread_that_ran_the_input() -> None:
    dump = ("Timeout (0:00:15)!\nThread 0x02 (most recent call first):\n"
            '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n'
            "\nThread 0x01 (most recent call first):\n"
            f'  File "{REPO}/ir/ops/pooling.py", line 225 in tap_outputs\n'
            f'  File "{REPO}/fuzz/worker.py", line 158 in execute\n')
    assert innermost_frame(fault_frames(dump)) == "ir/ops/pooling.py:tap_outputs"
