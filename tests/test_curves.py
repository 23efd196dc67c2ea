"""gradc.curves (SVG loss curves) and gradc.files (atomic writes)."""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gradc import files
from gradc.curves import loss_curve_svg, write_loss_curve
from gradc.files import write_bytes_atomically, write_text_atomically

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == NS + "svg"
    return root


def texts(root: ET.Element) -> list[str]:
    """The visible words of each <text> (its tooltip <title> left out)."""
    return [(t.text or "") + "".join(c.tail or "" for c in t) for t in root.iter(NS + "text")]


def polylines(root: ET.Element) -> list[list[tuple[float, float]]]:
    return [[tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
            for line in root.iter(NS + "polyline")]  # type: ignore[misc]


def test_series_and_legend_drawn() -> None:
    svg = loss_curve_svg({"gradc": [2.0, 1.5, 1.0, 0.8], "PyTorch": [2.0, 1.4, 1.1, 0.7]},
                         title="MLP", xlabel="step", ylabel="loss")
    root = parse(svg)
    lines = polylines(root)
    assert len(lines) == 2 and all(len(line) == 4 for line in lines)
    words = texts(root)
    for needle in ("MLP", "step", "loss", "gradc", "PyTorch"):
        assert needle in words
    # lower loss is drawn lower: a larger SVG y
    ys = [y for _, y in lines[0]]
    assert ys == sorted(ys)
    xs = [x for x, _ in lines[0]]
    assert xs == sorted(xs) and len(set(xs)) == 4
    assert loss_curve_svg({"a": [1.0, 2.0]}) == loss_curve_svg({"a": [1.0, 2.0]})


def test_readable_ticks() -> None:
    words = texts(parse(loss_curve_svg({"a": [0.31, 0.12, 0.05]})))
    assert {"0.05", "0.10", "0.30"} <= set(words) or {"0.1", "0.2", "0.3"} <= set(words), words
    log = texts(parse(loss_curve_svg({"a": [1e-6, 1.0, 1e3]}, log_y=True)))
    assert {"1e-6", "0.0001", "0.01", "1", "100"} <= set(log), log  # every other decade


def test_nan_and_inf_break_the_line_and_are_marked() -> None:
    values = [3.0, 2.0, math.nan, 1.5, math.inf, 1.0, 0.5]
    root = parse(loss_curve_svg({"run": values}))
    lines = polylines(root)
    assert [len(line) for line in lines] == [2, 2]  # (3, 2) and (1.0, 0.5); 1.5 alone
    assert len(list(root.iter(NS + "circle"))) == 1
    marks = [p for p in root.iter(NS + "path") if "not drawn" in "".join(p.itertext())]
    assert len(marks) == 2
    assert any("NaN" in "".join(m.itertext()) for m in marks)
    assert any("2 NaN/inf" in t for t in texts(root))
    for line in lines:
        assert all(math.isfinite(x) and math.isfinite(y) for x, y in line)


def test_log_scale_skips_non_positive() -> None:
    root = parse(loss_curve_svg({"a": [1.0, 0.0, 0.1, -1.0, 0.01]}, log_y=True))
    assert sum(len(line) for line in polylines(root)) == 0
    assert len(list(root.iter(NS + "circle"))) == 3
    assert any("2 NaN/inf/\u22640" in t for t in texts(root))


@pytest.mark.parametrize("series", [{}, {"empty": []}, {"nan": [math.nan, math.nan]},
                                    {"one": [0.5]}, {"flat": [1.0, 1.0, 1.0]}])
def test_degenerate_series(series: dict[str, list[float]]) -> None:
    root = parse(loss_curve_svg(series, log_y=False))
    parse(loss_curve_svg(series, log_y=True))
    words = texts(root)
    if not any(math.isfinite(v) for vs in series.values() for v in vs):
        assert "no data to draw" in words
    if "empty" in series:
        assert "(no data)" in words


def test_names_are_escaped() -> None:
    name = '<script>alert("x")</script> & \x00'
    root = parse(loss_curve_svg({name: [1.0, 0.5]}, title="a <b> & c"))
    assert "a <b> & c" in texts(root)
    assert not list(root.iter(NS + "script"))


def test_long_series_are_thinned_but_keep_spikes() -> None:
    values = [1.0] * 50_000
    values[31_337] = 100.0
    svg = loss_curve_svg({"long": values})
    assert len(svg) < 100_000
    ys = [y for line in polylines(parse(svg)) for _, y in line]
    assert len(ys) < 3000 and min(ys) < max(ys) - 100  # the spike is still drawn


def test_write_loss_curve(tmp_path: Path) -> None:
    path = tmp_path / "loss.svg"
    write_loss_curve(path, {"a": [1.0, 0.5]}, title="t", log_y=True)
    parse(path.read_text(encoding="utf-8"))


def test_atomic_write_replaces(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    write_text_atomically(path, "old")
    write_text_atomically(path, "new \u00e9")
    assert path.read_text(encoding="utf-8") == "new \u00e9"
    write_bytes_atomically(str(path), b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert os.listdir(tmp_path) == ["out.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("fail_at", ["fsync", "replace"])
@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_failed_write_leaves_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      fail_at: str, error: BaseException) -> None:
    path = tmp_path / "state.npz"
    path.write_bytes(b"old state")

    def fail(*args: object) -> None:
        raise error

    monkeypatch.setattr(files.os, fail_at, fail)
    with pytest.raises(type(error)):
        write_bytes_atomically(path, b"new state, half written")
    monkeypatch.undo()
    assert path.read_bytes() == b"old state"
    assert os.listdir(tmp_path) == ["state.npz"]  # the temporary file is gone


def test_atomic_write_refuses_wrong_types_and_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_bytes_atomically(tmp_path / "a", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        write_text_atomically(tmp_path / "a", b"bytes")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        write_text_atomically(tmp_path / "no" / "a", "x")
    assert os.listdir(tmp_path) == []
