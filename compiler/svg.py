"""gradc's own drawing of a directed acyclic graph as SVG: a layered layout, top to bottom.

``gradc show --format html`` draws with Graphviz's ``dot`` where it is installed and with this
module where it is not, so a ``pip install`` alone gives pictures. It needs only the standard
library and networkx::

    fig = Figure("g", [Box("a", "x\\nf32[2]"), Box("b", "relu")], [("a", "b")])
    open("g.svg", "w").write(to_svg(fig))

The layout is the classic one of Sugiyama et al., with every step bounded so that a few thousand
nodes take about a second:

1. Layers: longest path from the sources; then, from the bottom up, a node with at least as
   many outgoing as incoming edges moves down to just above its first user (an input or a
   constant is drawn beside its use, not at the top).
2. An edge that spans several layers becomes a chain of dummy points, one per layer it crosses
   (shortest edges first, up to a budget proportional to the node count; longer ones are drawn
   as one curve).
3. Order within layers: barycenter sweeps down and up, a fixed number, keeping the order with the
   fewest crossings.
4. x: each node is pulled toward the weighted median x of its neighbours, then the layer is
   projected back onto its order with room between boxes (isotonic regression: exact, linear
   time); a fixed number of sweeps. Then runs of one-to-one links (long edges above all) are put
   on vertical lines wherever their neighbours leave room.
5. A ``Group`` (a fused node's body) is laid out on its own, framed with its title, and placed in
   its parent as one large box. An edge into or out of a group runs through the group's top or
   bottom row, with dummies inside too, so that it does not cross the boxes there.

Every label is escaped for XML, and the same figure always gives the same bytes.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterable, Sequence

import networkx as nx

FONT_SIZE = 10.0
LINE_HEIGHT = 12.0
TITLE_SIZE = 11.0
RANK_SEP = 32.0   # vertical gap between layers
NODE_SEP = 18.0   # horizontal gap between boxes
EDGE_SEP = 8.0    # horizontal gap beside a dummy point
FRAME_PAD = 8.0   # inside a group's frame
FRAME_TITLE = 16.0
MARGIN = 8.0
ARROW = 7.0
ORDER_SWEEPS = 8  # barycenter sweeps (each one down and one up)
PLACE_SWEEPS = 8  # x-placement sweeps
POINTS_PER_NODE = 4  # budget of dummy points on long edges: so many per node,
MIN_POINTS = 2000    # and at least so many
EDGE_COLOR = "#6b7280"
STROKE = "#1f2937"


@dataclass(frozen=True)
class Box:
    """One node: its label (lines split at newlines), fill colour, shape and CSS class."""

    key: str
    label: str
    fill: str = "#e5e7eb"
    shape: str = "box"  # "box" (rounded), "ellipse" or "plain" (text only)
    css: str = "op"


@dataclass(frozen=True)
class Group:
    """A titled, filled frame around boxes (and nested groups) that are laid out together."""

    title: str
    items: Sequence[Item]
    fill: str = "#fde2b8"
    css: str = "fused"


Item = Box | Group


@dataclass(frozen=True)
class Figure:
    """What to draw: a title, the boxes and groups, and edges between box keys."""

    title: str
    items: Sequence[Item]
    edges: Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Rect:
    """An axis-aligned rectangle; y grows downwards, as in SVG."""

    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        """The x of the centre."""
        return self.x + self.w / 2

    @property
    def bottom(self) -> float:
        """The y of the lower side."""
        return self.y + self.h


Point = tuple[float, float]


@dataclass
class Layout:
    """Where everything goes: boxes by key, group frames (outer first), one route per edge."""

    width: float
    height: float
    boxes: dict[str, tuple[Box, Rect]] = field(default_factory=dict)
    groups: list[tuple[Group, Rect]] = field(default_factory=list)
    routes: list[tuple[tuple[str, str], list[Point]]] = field(default_factory=list)


# -- text metrics ------------------------------------------------------------------------------
_NARROW, _WIDE = set("ijlrtf.,:;[]()|!' "), set("mwMW%@")


def _text_width(text: str, size: float = FONT_SIZE) -> float:
    """An estimate of the width of ``text`` in a Helvetica-like font (no font files needed)."""
    em = sum(0.3 if c in _NARROW else 0.85 if c in _WIDE else 0.68 if c.isupper() else 0.56
             for c in text)
    return em * size


def _lines(label: str) -> list[str]:
    return label.replace("\r", "").split("\n")


def _box_size(box: Box) -> tuple[float, float]:
    """Width and height of a box, from its label."""
    lines = _lines(box.label)
    w = max(_text_width(line) for line in lines)
    h = LINE_HEIGHT * len(lines)
    if box.shape == "ellipse":  # an ellipse through the corners of the text's rectangle
        return w * 1.42 + 8, h * 1.42 + 4
    return w + 16, h + 8


# -- the layered arrangement of one container --------------------------------------------------
Stop = tuple[float, float, float]  # a dummy point: x, and the top and bottom of its layer


@dataclass
class _Arrangement:
    """One container's children placed: top-left corners, size, and where edges run.

    ``chains`` holds the stops of each long edge between two children; ``entries`` the stops
    from the container's top row down to a child that an edge from outside enters, and
    ``exits`` those from below a child that an edge leaves by down to the bottom row."""

    width: float
    height: float
    corners: list[Point]
    chains: dict[tuple[int, int], list[Stop]]
    entries: dict[int, list[Stop]]
    exits: dict[int, list[Stop]]


def _layers(n: int, pairs: Sequence[tuple[int, int]]) -> list[int]:
    """Longest-path layers, then nodes with slack moved down where edges get no longer."""
    dg = nx.DiGraph()
    dg.add_nodes_from(range(n))
    dg.add_edges_from(pairs)
    try:
        order = list(nx.topological_sort(dg))
    except nx.NetworkXUnfeasible:
        raise ValueError("svg: the graph has a cycle; only acyclic graphs are drawn") from None
    layer = [0] * n
    for v in order:
        layer[v] = max((layer[u] + 1 for u in dg.predecessors(v)), default=0)
    for v in reversed(order):
        # Moving v down shortens its out-edges and stretches its in-edges by as much: worth it
        # (or no loss, and v then sits by its users) when it has at least as many outs as ins.
        if 0 < dg.out_degree(v) and dg.in_degree(v) <= dg.out_degree(v):
            layer[v] = min(layer[s] for s in dg.successors(v)) - 1
    return layer


class _Layered:
    """The layered graph of one container: its children 0..n-1, then points of edges.

    A point is a dummy on a long edge, or a port: where edges from outside enter (top row) or
    leave (bottom row) on their way to or from a child in a middle row."""

    def __init__(self, sizes: Sequence[tuple[float, float]], pairs: Sequence[tuple[int, int]],
                 entries: Iterable[int] = (), exits: Iterable[int] = ()):
        self.sizes = list(sizes)
        self.real = len(sizes)
        self.layer = _layers(len(sizes), pairs)
        self.up: list[list[int]] = [[] for _ in sizes]
        self.down: list[list[int]] = [[] for _ in sizes]
        last = max(self.layer, default=0)
        self.entry = {c: self._point(0) for c in entries if self.layer[c] > 0}
        self.exit = {c: self._point(last) for c in exits if self.layer[c] < last}
        ports = [(p, c) for c, p in self.entry.items()] + list(self.exit.items())
        self.chains: dict[tuple[int, int], list[int]] = {}
        budget = max(MIN_POINTS, POINTS_PER_NODE * len(sizes))
        self._split_long_edges([*pairs, *ports], budget)

    def _split_long_edges(self, pairs: Sequence[tuple[int, int]], budget: int) -> None:
        # Dummies keep long edges out of the boxes, but cost time: the shortest edges get them
        # first; the rest are ordered by their ends alone and drawn as one curve.
        for i, j in sorted(pairs, key=lambda p: self.layer[p[1]] - self.layer[p[0]]):
            span = self.layer[j] - self.layer[i]
            if span - 1 <= budget:
                budget -= span - 1
                self.chains[i, j] = [self._point(self.layer[i] + k) for k in range(1, span)]
            path = [i, *self.chains.get((i, j), []), j]
            for u, v in zip(path, path[1:]):
                self.down[u].append(v)
                self.up[v].append(u)

    def _point(self, layer: int) -> int:
        self.sizes.append((0.0, 0.0))
        self.layer.append(layer)
        self.up.append([])
        self.down.append([])
        return len(self.sizes) - 1

    def is_point(self, v: int) -> bool:
        """Whether v is a point of an edge (dummy or port) rather than a child."""
        return v >= self.real

    def columns(self) -> list[list[int]]:
        """Runs of nodes joined one to one between adjacent layers: lines that should be straight.

        Every long edge's points form one, with the ends too where they have no other edge."""
        below = {v: self.down[v][0] for v in range(len(self.sizes)) if len(self.down[v]) == 1}
        link = {v: w for v, w in below.items()
                if len(self.up[w]) == 1 and self.layer[w] == self.layer[v] + 1}
        heads = sorted(set(link) - set(link.values()))
        out = []
        for v in heads:
            out.append([v])
            while v in link:
                v = link[v]
                out[-1].append(v)
        return out


def _crossings(rows: list[list[int]], down: list[list[int]], pos: list[int]) -> int:
    """Edge crossings between adjacent layers (inversions, counted with a Fenwick tree)."""
    total = 0
    for upper, lower in zip(rows, rows[1:]):
        below = set(lower)
        ends = sorted((pos[u], pos[v]) for u in upper for v in down[u] if v in below)
        tree = [0] * (len(lower) + 1)
        for seen, (_, p) in enumerate(ends):
            k = p + 1
            while k > 0:  # total -= how many seen edges end at or left of p
                total -= tree[k]
                k -= k & -k
            total += seen
            k = p + 1
            while k <= len(lower):
                tree[k] += 1
                k += k & -k
    return total


def _sort_row(row: list[int], nbrs: list[list[int]], pos: list[int]) -> None:
    """Order one layer by the mean position of each node's neighbours in the fixed layers."""
    def barycenter(v: int) -> float:
        return sum(pos[u] for u in nbrs[v]) / len(nbrs[v]) if nbrs[v] else pos[v]
    row.sort(key=barycenter)  # stable: ties keep their order
    for i, v in enumerate(row):
        pos[v] = i


def _order(g: _Layered) -> list[list[int]]:
    """Layers as rows of nodes, ordered by bounded barycenter sweeps to reduce crossings."""
    rows: list[list[int]] = [[] for _ in range(max(g.layer, default=-1) + 1)]
    for v, k in enumerate(g.layer):
        rows[k].append(v)
    pos = [0] * len(g.layer)
    for row in rows:
        for i, v in enumerate(row):
            pos[v] = i
    best, fewest = [list(r) for r in rows], _crossings(rows, g.down, pos)
    for _ in range(ORDER_SWEEPS):
        if fewest == 0:
            break
        for row in rows[1:]:
            _sort_row(row, g.up, pos)
        for row in reversed(rows[:-1]):
            _sort_row(row, g.down, pos)
        count = _crossings(rows, g.down, pos)
        if count < fewest:
            best, fewest = [list(r) for r in rows], count
    return best


def _project(wanted: list[float], weights: list[float], gaps: list[float]) -> list[float]:
    """The x nearest ``wanted`` (weighted least squares) with x[i+1] - x[i] >= gaps[i].

    With x[i] = y[i] + (sum of gaps before i) this is isotonic regression of y, which
    pool-adjacent-violators solves exactly in one pass."""
    offsets = [0.0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    blocks: list[list[float]] = []  # [weighted sum, weight, count] of pooled neighbours
    for t, w in zip((x - o for x, o in zip(wanted, offsets)), weights):
        blocks.append([t * w, w, 1])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] > blocks[-1][0] * blocks[-2][1]:
            s, w, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += w
            blocks[-1][2] += c
    out: list[float] = []
    for s, w, c in blocks:
        out += [s / w] * int(c)
    return [y + o for y, o in zip(out, offsets)]


def _pull(g: _Layered, v: int, x: list[float]) -> tuple[float, float]:
    """Where v's neighbours pull it (weighted median x) and how hard (the total weight)."""
    # Weights as in Gansner et al. (1993): 1, 2 or 8 as 0, 1 or 2 ends are points of edges,
    # so that long edges run straight. The median, not the mean, minimises the total weighted
    # edge slant, which keeps a chain straight rather than drifting toward a side branch.
    pulls = sorted((x[u], (1.0, 2.0, 8.0)[g.is_point(u) + g.is_point(v)])
                   for u in g.up[v] + g.down[v])
    weight = sum(w for _, w in pulls)
    if not pulls:
        return x[v], 1e-3
    seen = 0.0
    for i, (xu, w) in enumerate(pulls):
        seen += w
        if seen * 2 > weight:
            return xu, weight
        if seen * 2 == weight:  # an even split: anywhere between is as good; take the middle
            return (xu + pulls[i + 1][0]) / 2, weight
    return pulls[-1][0], weight


def _gaps(g: _Layered, row: list[int]) -> list[float]:
    """Least distances between the centres of neighbours in a row."""
    return [(g.sizes[a][0] + g.sizes[b][0]) / 2
            + (EDGE_SEP if g.is_point(a) or g.is_point(b) else NODE_SEP)
            for a, b in zip(row, row[1:])]


def _place_x(g: _Layered, rows: list[list[int]]) -> list[float]:
    """Centre x of every node: neighbours pulled together, order and spacing kept."""
    x = [0.0] * len(g.sizes)
    gaps = [_gaps(g, row) for row in rows]
    for row, gap in zip(rows, gaps):
        for v, xv in zip(row, _project([0.0] * len(row), [1.0] * len(row), gap)):
            x[v] = xv
    for sweep in range(PLACE_SWEEPS):
        order = range(len(rows)) if sweep % 2 == 0 else reversed(range(len(rows)))
        for k in order:
            wanted, weights = zip(*(_pull(g, v, x) for v in rows[k])) if rows[k] else ((), ())
            for v, xv in zip(rows[k], _project(list(wanted), list(weights), gaps[k])):
                x[v] = xv
    _straighten(g, rows, gaps, x)
    return x


def _straighten(g: _Layered, rows: list[list[int]], gaps: list[list[float]],
                x: list[float]) -> None:
    """Put each column on one vertical line, bending only where the neighbours leave no room."""
    slot = {v: (k, i) for k, row in enumerate(rows) for i, v in enumerate(row)}

    def room(v: int) -> tuple[float, float]:
        k, i = slot[v]
        lo = x[rows[k][i - 1]] + gaps[k][i - 1] if i > 0 else -float("inf")
        hi = x[rows[k][i + 1]] - gaps[k][i] if i + 1 < len(rows[k]) else float("inf")
        return lo, hi

    for column in g.columns():
        run: list[int] = []
        lo, hi = -float("inf"), float("inf")
        for v in column:
            v_lo, v_hi = room(v)
            if max(lo, v_lo) > min(hi, v_hi):  # no line through v too: a bend before v
                _align(run, lo, hi, x)
                run, lo, hi = [], -float("inf"), float("inf")
            run.append(v)
            lo, hi = max(lo, v_lo), min(hi, v_hi)
        _align(run, lo, hi, x)


def _align(run: list[int], lo: float, hi: float, x: list[float]) -> None:
    """Put the points of a run on the line nearest their mean x in [lo, hi]."""
    if run:
        line = min(max(sum(x[v] for v in run) / len(run), lo), hi)
        for v in run:
            x[v] = line


def _arrange(sizes: Sequence[tuple[float, float]], pairs: Sequence[tuple[int, int]],
            entries: Iterable[int] = (), exits: Iterable[int] = ()) -> _Arrangement:
    """Lay out boxes of the given sizes with edges between their indices, top to bottom."""
    g = _Layered(sizes, pairs, entries, exits)
    rows = _order(g)
    x = _place_x(g, rows)
    left = min((x[v] - g.sizes[v][0] / 2 for v in range(len(x))), default=0.0)
    right = max((x[v] + g.sizes[v][0] / 2 for v in range(len(x))), default=0.0)
    heights = [max((g.sizes[v][1] for v in row), default=0.0) for row in rows]
    tops = [0.0, *accumulate(h + RANK_SEP for h in heights[:-1])]

    def stops(points: Iterable[int]) -> list[Stop]:
        return [(x[v] - left, tops[g.layer[v]], tops[g.layer[v]] + heights[g.layer[v]])
                for v in points]

    corners = [(x[v] - left - w / 2, tops[g.layer[v]] + (heights[g.layer[v]] - h) / 2)
               for v, (w, h) in enumerate(g.sizes[:g.real])]
    chains = {(i, j): stops(c) for (i, j), c in g.chains.items() if j < g.real and i < g.real}
    entries_ = {c: stops([p, *g.chains.get((p, c), [])]) for c, p in g.entry.items()}
    exits_ = {c: stops([*g.chains.get((c, p), []), p]) for c, p in g.exit.items()}
    height = tops[-1] + heights[-1] if rows else 0.0
    return _Arrangement(right - left, height, corners, chains, entries_, exits_)


# -- containers, nested ------------------------------------------------------------------------
Address = tuple[int, ...]  # child indices from the figure down to a container or a box
Home = tuple[Address, tuple[int, int]]  # the container where an edge runs, and its two children


def _box_paths(items: Sequence[Item], prefix: Address = ()) -> dict[str, Address]:
    out: dict[str, Address] = {}
    for i, item in enumerate(items):
        if isinstance(item, Group):
            out.update(_box_paths(item.items, prefix + (i,)))
        elif item.key in out:
            raise ValueError(f"svg: box key {item.key!r} is used twice")
        else:
            out[item.key] = prefix + (i,)
    return out


def _edge_homes(edges: Iterable[tuple[str, str]],
                paths: dict[str, Address]) -> dict[tuple[str, str], Home]:
    """For each edge, the innermost container holding both ends, and the two children there."""
    homes = {}
    for a, b in dict.fromkeys(edges):  # a repeated edge is drawn once
        if a not in paths or b not in paths:
            raise ValueError(f"svg: edge {a!r} -> {b!r} names a box that is not in the figure")
        if a == b:
            continue  # a box is not drawn feeding itself
        pa, pb = paths[a], paths[b]
        k = 0
        while pa[k] == pb[k]:  # the paths of two boxes part before either ends
            k += 1
        homes[a, b] = (pa[:k], (pa[k], pb[k]))
    return homes


@dataclass
class _Needs:
    """Per container: edges between its children, children entered from and left to outside."""

    pairs: dict[Address, dict[tuple[int, int], None]] = field(default_factory=dict)
    entries: dict[Address, dict[int, None]] = field(default_factory=dict)
    exits: dict[Address, dict[int, None]] = field(default_factory=dict)

    def add(self, home: Home, a: Address, b: Address) -> None:
        """Record an edge from the box at path a to the box at path b, running in ``home``."""
        path, pair = home
        self.pairs.setdefault(path, {})[pair] = None
        for m in range(len(path) + 1, len(a)):  # the groups it leaves, and the one it enters
            self.exits.setdefault(a[:m], {})[a[m]] = None
        for m in range(len(path) + 1, len(b)):
            self.entries.setdefault(b[:m], {})[b[m]] = None


@dataclass
class _Block:
    """A laid-out container: its arrangement and the blocks of the groups among its children."""

    arrangement: _Arrangement
    sizes: list[tuple[float, float]]
    inner: dict[int, _Block]


def _block(items: Sequence[Item], path: Address, needs: _Needs) -> _Block:
    sizes, inner = [], {}
    for i, item in enumerate(items):
        if isinstance(item, Group):
            inner[i] = _block(item.items, path + (i,), needs)
            a = inner[i].arrangement
            sizes.append((max(a.width, _text_width(item.title)) + 2 * FRAME_PAD,
                          a.height + FRAME_TITLE + 2 * FRAME_PAD))
        else:
            sizes.append(_box_size(item))
    return _Block(_arrange(sizes, list(needs.pairs.get(path, {})), needs.entries.get(path, {}),
                          needs.exits.get(path, {})), sizes, inner)


@dataclass
class _Stops:
    """Absolute stops of edges, keyed by container path and child (pair)."""

    chains: dict[Home, list[Stop]] = field(default_factory=dict)
    entries: dict[tuple[Address, int], list[Stop]] = field(default_factory=dict)
    exits: dict[tuple[Address, int], list[Stop]] = field(default_factory=dict)

    def add(self, path: Address, a: _Arrangement, ox: float, oy: float) -> None:
        """Record one container's stops, moved to where the container lies."""
        def moved(stops: list[Stop]) -> list[Stop]:
            return [(x + ox, top + oy, bottom + oy) for x, top, bottom in stops]
        self.chains.update({(path, pair): moved(s) for pair, s in a.chains.items()})
        self.entries.update({(path, c): moved(s) for c, s in a.entries.items()})
        self.exits.update({(path, c): moved(s) for c, s in a.exits.items()})


def _collect(items: Sequence[Item], block: _Block, path: Address, origin: Point, out: Layout,
             stops: _Stops) -> None:
    """Absolute positions of the boxes, frames and edge stops of one container and below."""
    ox, oy = origin
    stops.add(path, block.arrangement, ox, oy)
    for i, item in enumerate(items):
        (cx, cy), (w, h) = block.arrangement.corners[i], block.sizes[i]
        rect = Rect(ox + cx, oy + cy, w, h)
        if isinstance(item, Box):
            out.boxes[item.key] = (item, rect)
            continue
        out.groups.append((item, rect))
        inner = block.inner[i]
        x = rect.x + (w - inner.arrangement.width) / 2
        _collect(item.items, inner, path + (i,), (x, rect.y + FRAME_TITLE + FRAME_PAD), out,
                 stops)


# -- edges -------------------------------------------------------------------------------------
def _ports(out: Layout, ends: list[tuple[str, float, int]], lower: bool) -> dict[int, Point]:
    """Where edges leave (lower side) or enter a box, spread in the order of the far ends."""
    by_box: dict[str, list[tuple[float, int]]] = {}
    for key, far_x, route in ends:
        by_box.setdefault(key, []).append((far_x, route))
    points = {}
    for key, group in by_box.items():
        box, r = out.boxes[key]
        group.sort()
        spread = min(r.w * 0.5, 10.0 * (len(group) - 1))
        for i, (_, route) in enumerate(group):
            x = r.cx + (spread * (i / (len(group) - 1) - 0.5) if len(group) > 1 else 0.0)
            dy = r.h / 2
            if box.shape == "ellipse":  # on the curve, not on its bounding box
                dy *= (max(0.0, 1 - (2 * (x - r.cx) / r.w) ** 2)) ** 0.5
            mid = r.y + r.h / 2
            points[route] = (x, mid + dy if lower else mid - dy)
    return points


def _stops(home: Home, a: Address, b: Address, stops: _Stops) -> list[Stop]:
    """An edge's stops: out of a's groups, across its home container, into b's groups."""
    path = home[0]
    out = [s for m in reversed(range(len(path) + 1, len(a)))
           for s in stops.exits.get((a[:m], a[m]), [])]
    out += stops.chains.get(home, [])
    out += [s for m in range(len(path) + 1, len(b)) for s in stops.entries.get((b[:m], b[m]), [])]
    return out


def _route_edges(out: Layout, homes: dict[tuple[str, str], Home], paths: dict[str, Address],
                 stops: _Stops) -> None:
    edges = list(homes)
    inner = [[(x, y) for x, top, bottom in _stops(homes[a, b], paths[a], paths[b], stops)
              for y in (top, bottom)] for a, b in edges]
    starts = _ports(out, [(a, (pts[0][0] if pts else out.boxes[b][1].cx), i)
                          for i, ((a, b), pts) in enumerate(zip(edges, inner))], lower=True)
    ends = _ports(out, [(b, (pts[-1][0] if pts else out.boxes[a][1].cx), i)
                        for i, ((a, b), pts) in enumerate(zip(edges, inner))], lower=False)
    for i, edge in enumerate(edges):
        out.routes.append((edge, [starts[i], *inner[i], ends[i]]))


def layout(figure: Figure) -> Layout:
    """Place every box, group frame and edge of the figure."""
    paths = _box_paths(figure.items)
    homes = _edge_homes(figure.edges, paths)
    needs = _Needs()
    for (a, b), home in homes.items():
        needs.add(home, paths[a], paths[b])
    block = _block(figure.items, (), needs)
    whole = block.arrangement
    top = MARGIN + TITLE_SIZE + 10
    width = max(whole.width, _text_width(figure.title, TITLE_SIZE)) + 2 * MARGIN
    out = Layout(width, whole.height + top + MARGIN)
    stops = _Stops()
    _collect(figure.items, block, (), ((width - whole.width) / 2, top), out, stops)
    _route_edges(out, homes, paths, stops)
    return out


# -- SVG ---------------------------------------------------------------------------------------
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """Text safe in XML content and attributes: markup escaped, characters XML lacks replaced."""
    return html.escape(_NOT_XML.sub("\ufffd", text), quote=True)


def _num(v: float) -> str:
    return f"{v + 0.0:.1f}"  # + 0.0 turns -0.0 into 0.0


def _pt(p: Point) -> str:
    return f"{_num(p[0])},{_num(p[1])}"


def _label(lines: list[str], cx: float, top: float, size: float = FONT_SIZE) -> list[str]:
    # A line's baseline sits about a third of the font size below its middle.
    font = "" if size == FONT_SIZE else f' font-size="{_num(size)}"'
    return [f'<text x="{_num(cx)}" y="{_num(top + LINE_HEIGHT * (i + 0.5) + size * 0.35)}" '
            f'text-anchor="middle"{font}>{xml_text(line)}</text>'
            for i, line in enumerate(lines)]


def _box_svg(box: Box, r: Rect) -> str:
    fill = xml_text(box.fill)
    if box.shape == "ellipse":
        shape = (f'<ellipse cx="{_num(r.cx)}" cy="{_num(r.y + r.h / 2)}" rx="{_num(r.w / 2)}" '
                 f'ry="{_num(r.h / 2)}" fill="{fill}" stroke="{STROKE}"/>')
    elif box.shape == "plain":
        shape = ""
    else:
        shape = (f'<rect x="{_num(r.x)}" y="{_num(r.y)}" width="{_num(r.w)}" '
                 f'height="{_num(r.h)}" rx="4" fill="{fill}" stroke="{STROKE}"/>')
    lines = _lines(box.label)
    text = _label(lines, r.cx, r.y + (r.h - LINE_HEIGHT * len(lines)) / 2)
    return f'<g class="node {xml_text(box.css)}">{shape}{"".join(text)}</g>'


def _group_svg(group: Group, r: Rect) -> str:
    frame = (f'<rect x="{_num(r.x)}" y="{_num(r.y)}" width="{_num(r.w)}" height="{_num(r.h)}" '
             f'rx="6" fill="{xml_text(group.fill)}" stroke="{STROKE}"/>')
    title = _label([group.title], r.cx, r.y + FRAME_PAD / 2)
    return f'<g class="cluster {xml_text(group.css)}">{frame}{title[0]}</g>'


def _edge_svg(points: list[Point]) -> str:
    """A path of cubic Béziers, vertical at every point, and an arrowhead pointing down."""
    tip = points[-1]
    pts = [*points[:-1], (tip[0], tip[1] - ARROW)]
    pts = [p for i, p in enumerate(pts)  # a point inside a vertical run adds nothing
           if not 0 < i < len(pts) - 1 or not pts[i - 1][0] == p[0] == pts[i + 1][0]]
    d = [f"M{_pt(pts[0])}"]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        dy = (y1 - y0) / 2
        d.append(f"C{_pt((x0, y0 + dy))} {_pt((x1, y1 - dy))} {_pt((x1, y1))}")
    head = " ".join(_pt(p) for p in ((tip[0] - ARROW / 2, tip[1] - ARROW), tip,
                                     (tip[0] + ARROW / 2, tip[1] - ARROW)))
    return (f'<g class="edge"><path d="{" ".join(d)}" fill="none" stroke="{EDGE_COLOR}"/>'
            f'<polygon points="{head}" fill="{EDGE_COLOR}" stroke="{EDGE_COLOR}"/></g>')


def to_svg(figure: Figure) -> str:
    """The figure drawn as one standalone ``<svg>`` element (frames, then edges, then boxes)."""
    lay = layout(figure)
    w, h = _num(lay.width), _num(lay.height)
    # Sized in points over a viewBox in pixels, as dot does: both pictures come out alike.
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="gradc-layout" width="{w}pt" '
             f'height="{h}pt" viewBox="0 0 {w} {h}" font-family="Helvetica, Arial, sans-serif" '
             f'font-size="{_num(FONT_SIZE)}">',
             f"<title>{xml_text(figure.title)}</title>",
             '<g class="graph">', *_label([figure.title], lay.width / 2, MARGIN, TITLE_SIZE)]
    parts += [_group_svg(g, r) for g, r in lay.groups]
    parts += [_edge_svg(points) for _, points in lay.routes]
    parts += [_box_svg(box, r) for box, r in lay.boxes.values()]
    parts.append("</g></svg>")
    return "\n".join(parts)
