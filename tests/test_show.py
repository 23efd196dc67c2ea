"""Tests of gradc.show: text, dot and the self-contained HTML page (rendered by Chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import gradc
from gradc import ops, show
from gradc.samples import train_step

NASTY = '</pre><script>alert("x")</script>\\ "q" &amp;'


def nasty_graph() -> gradc.Graph:
    """A graph whose every user-supplied name tries to break out of dot and HTML."""
    g = gradc.Graph("<script>alert(1)</script>")
    x = g.input(NASTY, "float32", (2, 4))
    dy = g.input('a"b\nc', "float32", (2, 4))
    a = ops.relu_grad(x, dy)
    g.output(ops.neg(ops.relu_grad(x, a)), "<b>out</b>")
    return g


def test_to_text() -> None:
    g = train_step()
    assert show.to_text(g) == str(g) + "\n"
    opt = gradc.optimize(g)
    text = show.to_text(g, opt)
    assert str(g) in text and str(opt.graph) in text
    for i, e in enumerate(opt.report, 1):
        assert f"{i:03d} {e.name}" in text
    assert "groups=1" in text


def test_dot_structure() -> None:
    opt = gradc.optimize(train_step())
    dot = show.to_dot(opt.graph)
    assert dot.startswith("digraph gradc {") and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == 3  # one per fused node
    assert 'label="fused: max_pooling_grad"' in dot
    ids = set(re.findall(r"^\s*([a-z]+\d+) \[", dot, re.M))
    edges = re.findall(r"^\s*([a-z]+\d+) -> ([a-z]+\d+);", dot, re.M)
    assert edges and all(a in ids and b in ids for a, b in edges)
    pair = show.to_dot_pair(train_step(), opt.graph)
    assert '"before passes"' in pair and '"after passes"' in pair


def test_dot_escaping() -> None:
    dot = show.to_dot(nasty_graph())
    for line in dot.splitlines():  # every label is one well-formed dot string
        for label in re.findall(r'label=("(?:[^"\\]|\\.)*")', line):
            assert "\n" not in label
    assert show.dot_quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_dot_renders_escaped_names() -> None:
    svg = show.render_svg(show.to_dot(nasty_graph()))
    assert svg is not None and svg.startswith("<svg")
    assert "<script" not in svg
    assert "&lt;b&gt;out&lt;/b&gt;" in svg  # the output name, drawn as text


def check_page(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", page)


def test_html_escapes_and_is_self_contained() -> None:
    page = show.to_html(nasty_graph())
    check_page(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    for i in range(1, 8):
        assert f'id="pass-{i}"' in page


def test_html_without_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(show.shutil, "which", lambda name: None)
    page = show.to_html(nasty_graph())
    check_page(page)
    assert "<svg" not in page and "Graphviz dot not found" in page
    assert 'class="listing"' in page and "&lt;/pre&gt;" in page


def test_show_formats() -> None:
    g = train_step()
    assert show.show(g, "text", passes=None) == str(g) + "\n"
    assert "fused" in show.show(g, "text")
    assert show.show(g, "dot", passes=None) == show.to_dot(g)
    assert "after passes" in show.show(g, "dot")
    with pytest.raises(gradc.GradcError, match="format"):
        show.show(g, "png")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None or shutil.which("dot") is None,
                    reason="needs chromium and Graphviz dot")
def test_page_renders_in_chromium(tmp_path) -> None:
    g = train_step()
    opt = gradc.optimize(g)
    path = tmp_path / "page.html"
    path.write_text(show.to_html(g, opt), encoding="utf-8")
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
           path.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    dom = r.stdout
    assert "<svg" in dom, r.stderr[-2000:]
    before, after = dom.split('id="after"', 1)
    assert before.count('class="node') >= len(g.inputs) + len(g.nodes)
    assert after.count('class="cluster') == 3  # the three fused groups
    assert "max_pooling_grad" in after
