"""Tests of gradc.show: text, dot and the self-contained HTML page (rendered by Chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from typing import Sequence

import pytest

import gradc
from gradc import ops, show, svg
from gradc.examples import train_step

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


def hide_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make Graphviz's dot look uninstalled (every other program is still found)."""
    which = shutil.which
    monkeypatch.setattr(show.shutil, "which",
                        lambda name, *a, **k: None if name == "dot" else which(name, *a, **k))


BUILT_IN = '<svg xmlns="http://www.w3.org/2000/svg" class="gradc-layout"'


def test_html_without_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_dot(monkeypatch)
    page = show.to_html(nasty_graph())
    check_page(page)
    assert page.count(BUILT_IN) == 2 and 'class="listing"' not in page  # before and after
    assert page.count("drawn by gradc&#x27;s built-in layout (Graphviz dot not found)") == 2
    for picture in re.findall(r"<svg .*?</svg>", page, re.S):
        ET.fromstring(picture)  # well-formed XML: no name broke out
    assert "&lt;/pre&gt;&lt;script&gt;" in page and "&lt;b&gt;out&lt;/b&gt;" in page


def test_html_when_dot_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(show.shutil, "which", lambda name, *a, **k: "/usr/bin/dot")
    monkeypatch.setattr(show, "render_svg", lambda source, timeout=60.0: None)
    page = show.to_html(train_step(), passes=None)
    assert page.count(BUILT_IN) == 2 and "(Graphviz dot failed)" in page


def test_html_too_large_to_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(show, "MAX_DRAWN_NODES", 3)
    page = show.to_html(train_step(), passes=None)
    assert "<svg" not in page and page.count('class="listing"') == 2
    assert "too large to draw" in page


def _dot_unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], text)


def _dot_labels(dot: str) -> dict[str, tuple[str, str]]:
    """Each dot node id -> (label, fill colour)."""
    found = re.findall(r'^\s*([a-z]+\d+) \[label="((?:[^"\\]|\\.)*)".*fillcolor="([^"]*)"', dot,
                       re.M)
    return {i: (_dot_unquote(label), fill) for i, label, fill in found}


def _figure_boxes(items: Sequence[svg.Item]) -> list[svg.Box]:
    out: list[svg.Box] = []
    for item in items:
        out += _figure_boxes(item.items) if isinstance(item, svg.Group) else [item]
    return out


def test_built_in_figure_shows_what_dot_shows() -> None:
    g = gradc.optimize(train_step()).graph
    dot, fig = show.to_dot(g), show.to_figure(g)
    labels = _dot_labels(dot)
    boxes = {b.key: b for b in _figure_boxes(fig.items)}
    assert sorted((b.label, b.fill) for b in boxes.values()) == sorted(labels.values())
    dot_edges = {(labels[a][0], labels[b][0])
                 for a, b in re.findall(r"^\s*([a-z]+\d+) -> ([a-z]+\d+);", dot, re.M)}
    assert {(boxes[a].label, boxes[b].label) for a, b in fig.edges} == dot_edges
    groups = [i for i in fig.items if isinstance(i, svg.Group)]
    assert sorted(grp.title for grp in groups) == sorted(re.findall(r'label="(fused: \w+)"', dot))
    assert fig.title == "graph " + g.name


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


# Put into a copy of the page (the page itself has no scripts): what Chromium drew, per picture.
MEASURE = """<script>
for (const id of ["before", "after"]) {
  const svg = document.querySelector("#" + id + " svg");
  const size = svg.getBoundingClientRect();
  let drawn = 0, overflowing = 0;
  for (const node of svg.querySelectorAll("g.node")) {
    const box = node.getBBox();
    if (box.width > 0 && box.height > 0) drawn += 1;
    const frame = node.querySelector("rect, ellipse");
    for (const text of node.querySelectorAll("text"))
      if (frame && text.getComputedTextLength() > frame.getBBox().width) overflowing += 1;
  }
  const p = document.createElement("p");
  p.className = "measured";
  p.textContent = [id, Math.round(size.width), Math.round(size.height), drawn, overflowing]
    .join(" ");
  document.body.append(p);
}
</script>"""


def drawn_boxes(g: gradc.Graph) -> int:
    """Boxes in a picture of g: inputs, returns, and nodes (a fused node's body, not itself)."""
    def count(nodes: Sequence[gradc.Node]) -> int:
        return sum(count(n.body.nodes) if n.body is not None else 1 for n in nodes)
    return len(g.inputs) + len(g.outputs) + count(g.nodes)


@pytest.mark.skipif(_chromium() is None, reason="needs chromium")
@pytest.mark.parametrize("renderer", ["dot", "built-in"])
def test_page_renders_in_chromium(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                  renderer: str) -> None:
    if renderer == "dot" and shutil.which("dot") is None:
        pytest.skip("needs Graphviz dot")
    chromium = _chromium()
    if renderer == "built-in":
        hide_dot(monkeypatch)
    g = train_step()
    opt = gradc.optimize(g)
    page = show.to_html(g, opt)
    assert page.count("drawn by Graphviz dot" if renderer == "dot" else BUILT_IN) == 2
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
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
    measured = re.findall(r'<p class="measured">(\w+) (\d+) (\d+) (\d+) (\d+)</p>', dom)
    assert [m[0] for m in measured] == ["before", "after"], r.stderr[-2000:]
    for (_, width, height, drawn, overflowing), graph in zip(measured, (g, opt.graph)):
        assert int(width) > 100 and int(height) > 300  # laid out, not an empty box
        assert int(drawn) == drawn_boxes(graph)  # every box has an area on the screen
        assert int(overflowing) == 0  # and every label fits in its box
