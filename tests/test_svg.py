"""Tests of gradc.svg: the built-in layered layout and its SVG (pictures without Graphviz)."""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

import pytest

from gradc.svg import Box, Figure, Group, Layout, Rect, layout, to_svg

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script> & \'q\' ]]> \x00\x1b'


def random_figure(n: int, seed: int = 0, groups: bool = False) -> Figure:
    """A random DAG of n boxes (edges go from lower to higher index), some of them grouped."""
    rng = random.Random(seed)
    boxes = [Box(f"b{i}", f"op{i}\n%{i}: f32[N,{rng.randrange(1, 999)}]") for i in range(n)]
    edges = [(f"b{rng.randrange(max(0, i - 40), i)}", f"b{i}")
             for i in range(1, n) for _ in range(rng.choice((1, 1, 2)))]
    items: list[Box | Group] = list(boxes)
    if groups:  # every tenth run of three boxes (edges run in, out and through) in a frame
        items = []
        for i in range(0, n, 3):
            run = boxes[i:i + 3]
            items += [Group(f"fused {i}", run)] if i % 30 == 0 else run
    return Figure("random", items, edges)


def nested_figure() -> Figure:
    """Groups in groups, with edges that enter and leave them at middle layers."""
    inner = Group("inner", [Box("c", "c"), Box("d", "d")], css="fused inner")
    outer = Group("outer", [Box("b", "b"), inner, Box("e", "e")])
    items = [Box("a", "a", shape="ellipse"), outer, Box("f", "f"),
             Box("z", "return %z", shape="plain")]
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("a", "d"), ("a", "e"),
             ("c", "f"), ("b", "f"), ("f", "z"), ("e", "z"), ("a", "z")]
    return Figure("nested", items, edges)


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def with_class(root: ET.Element, word: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}g") if word in e.get("class", "").split()]


def test_standalone_svg_with_size() -> None:
    svg = to_svg(nested_figure())
    assert svg.startswith("<svg ") and svg.endswith("</svg>")
    root = parse(svg)
    width, height = (float(root.get(k, "").removesuffix("pt")) for k in ("width", "height"))
    assert width > 0 and height > 0
    assert root.get("viewBox") == f"0 0 {width:.1f} {height:.1f}"


@pytest.mark.parametrize("figure", [nested_figure(), random_figure(60, 1, groups=True)],
                         ids=["nested", "random"])
def test_one_box_per_node_one_path_per_edge(figure: Figure) -> None:
    root = parse(to_svg(figure))
    lay = layout(figure)
    nodes = with_class(root, "node")
    assert len(nodes) == len(lay.boxes)
    assert len(with_class(root, "cluster")) == len(lay.groups)
    edges = with_class(root, "edge")
    assert len(edges) == len(set(figure.edges))
    assert len(list(root.iter(f"{SVG}path"))) == len(edges)
    assert all(len(e.findall(f"{SVG}path")) == 1 for e in edges)
    boxes = [e for e in nodes if "plain" not in e.get("class", "")]
    assert all(len(e.findall(f"{SVG}rect") + e.findall(f"{SVG}ellipse")) <= 1 for e in boxes)


def test_nested_figure_counts() -> None:
    root = parse(to_svg(nested_figure()))
    assert len(with_class(root, "node")) == 7
    assert len(with_class(root, "cluster")) == 2 and len(with_class(root, "inner")) == 1
    assert len(root.findall(f".//{SVG}ellipse")) == 1  # the one input


def test_deterministic() -> None:
    a, b = random_figure(300, 7, groups=True), random_figure(300, 7, groups=True)
    assert a is not b and to_svg(a) == to_svg(b) == to_svg(a)


def test_escapes_hostile_names() -> None:
    fig = Figure(HOSTILE, [Group(HOSTILE, [Box("k&<", HOSTILE + "\nline 2", fill='"/><x a="')]),
                           Box(HOSTILE, "&amp;", shape="ellipse", css='"><script>')],
                 [("k&<", HOSTILE)])
    svg = to_svg(fig)
    assert "<script" not in svg and "<x " not in svg and "\x00" not in svg
    root = parse(svg)  # well-formed, so every name is inside its text or attribute
    texts = [t.text for t in root.iter(f"{SVG}text")]
    shown = HOSTILE.replace("\x00", "\ufffd").replace("\x1b", "\ufffd")
    assert texts.count(shown) == 3 and "line 2" in texts and "&amp;" in texts
    assert any(r.get("fill") == '"/><x a="' for r in root.iter(f"{SVG}rect"))


def edge_ends(lay: Layout, edge: tuple[str, str]) -> tuple[Rect, Rect]:
    return lay.boxes[edge[0]][1], lay.boxes[edge[1]][1]


@pytest.mark.parametrize("figure", [nested_figure(), random_figure(200, 3, groups=True)],
                         ids=["nested", "random"])
def test_every_edge_goes_down(figure: Figure) -> None:
    lay = layout(figure)
    assert len(lay.routes) == len(set(figure.edges))
    for edge, points in lay.routes:
        source, target = edge_ends(lay, edge)
        assert source.bottom < target.y, edge  # layers respect the edge's direction
        ys = [y for _, y in points]
        assert ys == sorted(ys), edge
        assert source.y < ys[0] <= source.bottom + 1e-6, edge  # leaves from the lower side
        assert target.y - 1e-6 <= ys[-1] < target.bottom, edge  # enters from the upper side
    for path in re.findall(r'<path d="([^"]*)"', to_svg(figure)):
        ys = [float(y) for y in re.findall(r"-?[\d.]+,(-?[\d.]+)", path)]
        assert ys[0] < ys[-1]


def overlap(a: Rect, b: Rect) -> bool:
    return a.x < b.x + b.w and b.x < a.x + a.w and a.y < b.y + b.h and b.y < a.y + a.h


def inside(a: Rect, b: Rect) -> bool:
    return b.x <= a.x and a.x + a.w <= b.x + b.w and b.y <= a.y and a.bottom <= b.bottom


def test_boxes_apart_and_framed() -> None:
    fig = random_figure(90, 5, groups=True)
    lay = layout(fig)
    rects = [r for _, r in lay.boxes.values()]
    assert not any(overlap(a, b) for i, a in enumerate(rects) for b in rects[i + 1:])
    for group, frame in lay.groups:
        for item in group.items:
            assert isinstance(item, Box) and inside(lay.boxes[item.key][1], frame)
    everything = Rect(0, 0, lay.width, lay.height)
    assert all(inside(r, everything) for r in rects)


def test_large_graph_lays_out() -> None:
    fig = random_figure(2000, 11)
    root = parse(to_svg(fig))
    assert len(with_class(root, "node")) == 2000


def test_rejects_cycles_and_unknown_boxes() -> None:
    boxes = [Box("a", "a"), Box("b", "b")]
    with pytest.raises(ValueError, match="cycle"):
        layout(Figure("g", boxes, [("a", "b"), ("b", "a")]))
    with pytest.raises(ValueError, match="'c'"):
        layout(Figure("g", boxes, [("a", "c")]))
    with pytest.raises(ValueError, match="twice"):
        layout(Figure("g", boxes + [Box("a", "again")], []))


def test_empty_and_self_loop() -> None:
    assert parse(to_svg(Figure("empty", [], [])))
    root = parse(to_svg(Figure("loop", [Box("a", "a")], [("a", "a")])))
    assert not with_class(root, "edge")
