"""Text-IR tests of the passes: each ``tests/passes_ir/*.ir`` file is one case.

    # RUN: canonicalize,dce              the pipeline (as for ``gradc.optimize``)
    # STATS: rewritten:relu-grad-of-relu=1   counters the report must show (optional, summed)
    # SHAPES: N=2                          symbol values for the semantic check (optional)
    graph t(...) { ... }                  the input
    # CHECK:
    graph t(...) { ... }                  the expected result, or the word ``unchanged``

Every case also runs the input and the result on the reference target with random arrays
(special values included) and compares them bit for bit. ``GRADC_UPDATE_PASSES_IR=1`` rewrites
the expected sections from the current output (review the diff before committing).
"""

from __future__ import annotations

import os
import pathlib
import warnings
from collections import Counter

import numpy as np
import pytest

import gradc
from gradc.ir.fused import violations as contract_violations
from graphgen import random_array

HERE = pathlib.Path(__file__).parent / "passes_ir"
CASES = sorted(HERE.glob("*.ir"))
UPDATE = os.environ.get("GRADC_UPDATE_PASSES_IR") == "1"


def parse_case(text: str) -> dict:
    """The header fields, the input text and the expected text of a case file."""
    head, sep, expected = text.partition("\n# CHECK:")
    if not sep:
        raise ValueError("no '# CHECK:' line")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        for key in ("RUN", "STATS", "SHAPES"):
            if line.startswith(f"# {key}:"):
                fields[key] = line.split(":", 1)[1].strip()
    if "RUN" not in fields:
        raise ValueError("no '# RUN:' line")
    return {"fields": fields, "input": head, "expected": expected.strip()}


def _pairs(spec: str) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in (p.split("=") for p in spec.split() if p)}


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def check_same_results(before: gradc.Graph, after: gradc.Graph, shapes: dict[str, int]) -> None:
    """Reference results of both graphs agree bit for bit on random special-valued arrays."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        feeds = {v.name: random_array(rng, tuple(shapes.get(d, d) for d in v.type.shape),
                                      v.type.dtype.numpy) for v in before.inputs}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # 0 * inf in the oracle
            want = gradc.compile(before, "reference", passes=None, shapes=shapes)(**feeds)
            got = gradc.compile(after, "reference", passes=None, shapes=shapes)(**feeds)
        assert list(want) == list(got)
        for k in want:
            np.testing.assert_array_equal(_bits(got[k]), _bits(want[k]), err_msg=k)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: pathlib.Path) -> None:
    case = parse_case(path.read_text())
    f = case["fields"]
    src = gradc.parse(case["input"])
    before = str(src)
    opt = gradc.optimize(src, f["RUN"])
    assert str(src) == before, "a pass modified its input"
    result = str(opt.graph)
    if UPDATE:
        expected_text = "unchanged" if result == before else result
        path.write_text(case["input"].rstrip("\n") + "\n# CHECK:\n" + expected_text + "\n")
    elif case["expected"] == "unchanged":
        assert result == before
        assert not any(e.changed for e in opt.report)
    else:
        assert result == str(gradc.parse(case["expected"]))
    assert gradc.parse(result) == opt.graph
    if "STATS" in f:
        got = Counter()
        for e in opt.report:
            got.update({k: v for k, v in e.stats.items() if isinstance(v, int)})
        for k, v in _pairs(f["STATS"]).items():
            assert got[k] == v, f"{k}: expected {v}, got {got[k]}"
    for n in opt.graph.nodes:
        if n.body is not None:
            assert contract_violations(n) == [], n
    check_same_results(src, opt.graph, _pairs(f.get("SHAPES", "")))


def test_format_errors() -> None:
    with pytest.raises(ValueError):
        parse_case("graph t() {}\n")
    with pytest.raises(ValueError):
        parse_case("graph t() {}\n# CHECK:\nunchanged")
