"""Look at a graph and at what the passes did: text, Graphviz dot, one self-contained HTML page.

    print(gradc.show.to_text(g, gradc.optimize(g)))      # IR before, per-pass table, IR after
    open("g.dot", "w").write(gradc.show.to_dot(g))       # dot -Tsvg g.dot > g.svg
    open("g.html", "w").write(gradc.show.to_html(g))     # runs the default pipeline

The HTML page draws the graph before and after the pipeline as inline SVG and lists, per pass,
its time, statistics, diff and IR. Graphviz (the ``dot`` program) draws the pictures when it is on
the PATH; otherwise gradc's own layout (``gradc.svg``) draws the same boxes, clusters, colours and
edges, and a note under each picture says which one drew it. Graphs too large to draw get a plain
listing. Every user-supplied name is escaped for dot, SVG and HTML; the page loads nothing from
outside.
"""

from __future__ import annotations

import html
import shutil
import subprocess
from typing import Any, Mapping, Sequence

from gradc import svg
from gradc.errors import GradcError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import anchors_group, is_elementwise
from gradc.ir.printer import fmt_name, fmt_type
from gradc.passes import Optimized, optimize
from gradc.passes.instruments import unified_diff

MAX_DRAWN_NODES = 1500
PARAMETER_COLOR = "#fef3c7"  # parameters are drawn like inputs, in their own shade
COLORS = {"fused": "#fde2b8", "elementwise": "#dbeafe", "anchor": "#fecaca", "other": "#e5e7eb",
          "constant": "#f3f4f6"}


# -- text --------------------------------------------------------------------------------------
def stats_line(stats: dict[str, Any]) -> str:
    """``a=1 b=2`` for the counters of a pass."""
    return " ".join(f"{k}={v}" for k, v in stats.items())


def to_text(graph: Graph, optimized: Optimized | None = None) -> str:
    """The IR, or with ``optimized``: the IR before, one line per pass, the IR after."""
    if optimized is None:
        return str(graph) + "\n"
    lines = ["// ----- input -----", str(graph), "", "// ----- passes -----"]
    for i, e in enumerate(optimized.report, 1):
        state = "changed" if e.changed else "unchanged"
        lines.append(f"{i:03d} {e.name:<18} {state:<9} {1000 * e.seconds:9.3f} ms  "
                     f"{stats_line(e.stats)}")
    lines += ["", "// ----- output -----", str(optimized.graph)]
    return "\n".join(lines) + "\n"


# -- dot ---------------------------------------------------------------------------------------
def dot_quote(text: str) -> str:
    """A dot string literal: quotes and backslashes escaped, newlines as ``\\n``."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r", "").replace("\n", "\\n")
    return f'"{text}"'


def _color(n: Node) -> str:
    if n.body is not None:
        return COLORS["fused"]
    if anchors_group(n.op):
        return COLORS["anchor"]
    if n.op == "constant":
        return COLORS["constant"]
    return COLORS["elementwise" if is_elementwise(n) else "other"]


def _node_label(n: Node) -> str:
    results = "\n".join(f"{fmt_name(v.name)}: {fmt_type(v.type)}" for v in n.outputs)
    return f"{n.op}\n{results}"


class _DotWriter:
    """Writes graphs (and fused bodies, as clusters) as dot statements with generated ids."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.edge_lines: list[str] = []  # written at top level: a node named inside a
        self.count = 0                   # cluster would otherwise be drawn in it

    def new_id(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def graph(self, g: Graph, source: dict[Value, str], indent: str) -> dict[Value, str]:
        """Emit g's nodes; ``source`` maps its inputs to dot ids; returns ids of its outputs."""
        for n in g.nodes:
            if n.body is not None:
                self.fused(n, source, indent)
                continue
            nid = self.new_id("n")
            self.lines.append(f"{indent}{nid} [label={dot_quote(_node_label(n))}, "
                              f'fillcolor="{_color(n)}", class="op"];')
            self.edges(n, source, nid, indent)
            for v in n.outputs:
                source[v] = nid
        return {v: source[v] for v in g.outputs}

    def edges(self, n: Node, source: dict[Value, str], nid: str, indent: str) -> None:
        for v in dict.fromkeys(n.inputs):
            self.edge_lines.append(f"  {source[v]} -> {nid};")

    def fused(self, n: Node, source: dict[Value, str], indent: str) -> None:
        body = n.body
        assert body is not None
        cid = self.new_id("cluster_")
        title = f"fused: {n.attrs.get('kind', '')}"
        self.lines.append(f"{indent}subgraph {cid} {{")
        self.lines.append(f'{indent}  label={dot_quote(title)}; style="rounded,filled"; '
                          f'fillcolor="{COLORS["fused"]}"; class="fused";')
        inner = {b: source[v] for b, v in zip(body.inputs, n.inputs)}
        outs = self.graph(body, inner, indent + "  ")
        self.lines.append(f"{indent}}}")
        for v, b in zip(n.outputs, body.outputs):
            source[v] = outs[b]

    def inputs(self, g: Graph, indent: str) -> dict[Value, str]:
        source = {}
        for v in g.inputs:
            vid = self.new_id("i")
            label = f"{fmt_name(v.name)}\n{fmt_type(v.type)}"
            self.lines.append(f"{indent}{vid} [label={dot_quote(label)}, shape=ellipse, "
                              'fillcolor="#ffffff", class="input"];')
            source[v] = vid
        for p in g.parameters:  # drawn like inputs, in a shade of their own (never the values)
            vid = self.new_id("p")
            label = f"param {fmt_name(p.name)}\n{fmt_type(p.type)}"
            self.lines.append(f"{indent}{vid} [label={dot_quote(label)}, shape=ellipse, "
                              f'fillcolor="{PARAMETER_COLOR}", class="parameter"];')
            source[p] = vid
        return source

    def outputs(self, g: Graph, source: dict[Value, str], indent: str) -> None:
        for v in g.outputs:
            oid = self.new_id("o")
            self.lines.append(f"{indent}{oid} [label={dot_quote('return ' + fmt_name(v.name))}, "
                              'shape=plaintext, fillcolor="#ffffff", class="output"];')
            self.edge_lines.append(f"  {source[v]} -> {oid};")

    def whole(self, g: Graph, indent: str) -> None:
        source = self.inputs(g, indent)
        self.graph(g, source, indent)
        self.outputs(g, source, indent)


_HEADER = ['  graph [rankdir=TB, fontname="Helvetica", fontsize=11];',
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
           '  edge [color="#6b7280", arrowsize=0.6];']


def to_dot(graph: Graph) -> str:
    """The dependence graph in Graphviz dot (fused bodies drawn as clusters)."""
    w = _DotWriter()
    w.whole(graph, "  ")
    head = ["digraph gradc {", f"  label={dot_quote('graph ' + graph.name)}; labelloc=t;"]
    return "\n".join(head + _HEADER + w.lines + w.edge_lines + ["}"]) + "\n"


def to_dot_pair(before: Graph, after: Graph) -> str:
    """One dot graph with the graph before and after the passes side by side."""
    w = _DotWriter()
    lines = ["digraph gradc {", f"  label={dot_quote('graph ' + before.name)}; labelloc=t;"]
    lines += _HEADER
    for title, g in (("before passes", before), ("after passes", after)):
        w.lines = []
        w.whole(g, "    ")
        cid = w.new_id("cluster_")
        lines += [f"  subgraph {cid} {{", f"    label={dot_quote(title)};"] + w.lines + ["  }"]
    return "\n".join(lines + w.edge_lines + ["}"]) + "\n"


def render_svg(dot_source: str, timeout: float = 60.0) -> str | None:
    """Inline SVG from Graphviz ``dot``, or None if ``dot`` is missing or fails."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, "-Tsvg"], input=dot_source.encode("utf-8"),
                           capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    text = r.stdout.decode("utf-8", "replace")
    start = text.find("<svg")
    return text[start:] if start >= 0 else None


# -- built-in layout (no Graphviz) -------------------------------------------------------------
class _FigureWriter:
    """Builds what ``_DotWriter`` writes (boxes, fused bodies as groups, edges) as a figure."""

    def __init__(self) -> None:
        self.edges: list[tuple[str, str]] = []
        self.count = 0

    def new_key(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def graph(self, g: Graph, source: dict[Value, str]) -> list[svg.Item]:
        """g's nodes as boxes and groups; ``source`` maps each value to its producer's key."""
        items: list[svg.Item] = []
        for n in g.nodes:
            if n.body is not None:
                items.append(self.fused(n, source))
                continue
            key = self.new_key("n")
            items.append(svg.Box(key, _node_label(n), _color(n), css="op"))
            self.edges += [(source[v], key) for v in dict.fromkeys(n.inputs)]
            for v in n.outputs:
                source[v] = key
        return items

    def fused(self, n: Node, source: dict[Value, str]) -> svg.Group:
        """A fused node's body as a group, titled as its dot cluster is."""
        body = n.body
        assert body is not None
        inner = {b: source[v] for b, v in zip(body.inputs, n.inputs)}
        items = self.graph(body, inner)
        for v, b in zip(n.outputs, body.outputs):
            source[v] = inner[b]
        return svg.Group(f"fused: {n.attrs.get('kind', '')}", items, COLORS["fused"])

    def whole(self, g: Graph) -> svg.Figure:
        """The graph's inputs, nodes and returns, titled as ``to_dot`` titles it."""
        source = {v: self.new_key("i") for v in g.inputs}
        items: list[svg.Item] = [
            svg.Box(source[v], f"{fmt_name(v.name)}\n{fmt_type(v.type)}", "#ffffff", "ellipse",
                    "input") for v in g.inputs]
        for p in g.parameters:
            source[p] = self.new_key("p")
            items.append(svg.Box(source[p], f"param {fmt_name(p.name)}\n{fmt_type(p.type)}",
                                 PARAMETER_COLOR, "ellipse", "parameter"))
        items += self.graph(g, source)
        for v in g.outputs:
            key = self.new_key("o")
            items.append(svg.Box(key, "return " + fmt_name(v.name), "#ffffff", "plain", "output"))
            self.edges.append((source[v], key))
        return svg.Figure("graph " + g.name, items, self.edges)


def to_figure(graph: Graph) -> svg.Figure:
    """The picture ``to_dot`` describes, for gradc's built-in layout (``gradc.svg``)."""
    return _FigureWriter().whole(graph)


# -- html --------------------------------------------------------------------------------------
_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #111827; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #d1d5db; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f9fafb; border: 1px solid #e5e7eb; padding: 0.6em; overflow-x: auto;
      font-size: 0.8em; }
.graphs { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
.graphs > div { flex: 1 1 30em; overflow: auto; max-height: 90vh; }
.graphs svg { max-width: 100%; height: auto; }
.add { color: #047857; } .del { color: #b91c1c; } .hunk { color: #6d28d9; }
details { margin: 0.4em 0; } summary { cursor: pointer; }
.unchanged { color: #6b7280; }
"""


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def drawing(graph: Graph) -> str:
    """Inline SVG of the graph by Graphviz dot, else by gradc's layout; too large: a listing."""
    size = sum(1 + (len(n.body.nodes) if n.body is not None else 0) for n in graph.nodes)
    if size > MAX_DRAWN_NODES:
        return f'<p class="note">({size} nodes: too large to draw; listing instead)</p>' \
               f'<pre class="listing">{_esc(str(graph))}</pre>'
    picture = render_svg(to_dot(graph))
    if picture is not None:
        return f'{picture}<p class="note drawn-by">drawn by Graphviz dot</p>'
    # dot is missing (or failed): pip installs everything the built-in layout needs.
    why = "Graphviz dot not found" if shutil.which("dot") is None else "Graphviz dot failed"
    note = f"drawn by gradc's built-in layout ({why})"
    return f'{svg.to_svg(to_figure(graph))}<p class="note drawn-by">{_esc(note)}</p>'


def _diff_html(before: str, after: str, name: str) -> str:
    out = []
    for line in unified_diff(before, after, name).splitlines():
        cls = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")
        out.append(f'<span class="{cls}">{_esc(line)}</span>' if cls else _esc(line))
    return "\n".join(out)


def _stats_cell(stats: dict[str, Any]) -> str:
    return "<br>".join(f"{_esc(k)} = {_esc(v)}" for k, v in stats.items())


def _summary(opt: Optimized) -> str:
    rows = ["<tr><th>#</th><th>pass</th><th>changed</th><th>ms</th><th>nodes</th>"
            "<th>bytes moved</th><th>statistics</th></tr>"]
    for i, e in enumerate(opt.report, 1):
        s = dict(e.stats)
        nodes = f"{s.pop('nodes-before', '?')} &rarr; {s.pop('nodes-after', '?')}"
        traffic = f"{s.pop('bytes-before', '?')} &rarr; {s.pop('bytes-after', '?')}"
        rows.append(f'<tr class="{"changed" if e.changed else "unchanged"}"><td>{i}</td>'
                    f"<td>{_esc(e.name)}</td><td>{'yes' if e.changed else 'no'}</td>"
                    f'<td class="num">{1000 * e.seconds:.3f}</td><td class="num">{nodes}</td>'
                    f'<td class="num">{traffic}</td><td>{_stats_cell(s)}</td></tr>')
    return "<table>" + "\n".join(rows) + "</table>"


def _pass_details(opt: Optimized) -> str:
    parts = []
    before = opt.input_ir
    for i, e in enumerate(opt.report, 1):
        state = "changed" if e.changed else "unchanged"
        diff = _diff_html(before, e.ir, e.name) if e.changed else "(no change)"
        parts.append(
            f'<details class="pass" id="pass-{i}"><summary>{i:03d} {_esc(e.name)} &mdash; '
            f"{state}, {1000 * e.seconds:.3f} ms</summary>"
            f"<p>{_stats_cell(e.stats)}</p><h3>Diff</h3><pre class=\"diff\">{diff}</pre>"
            f"<h3>IR after</h3><pre>{_esc(e.ir)}</pre></details>")
        before = e.ir
    return "\n".join(parts)


def to_html(graph: Graph, optimized: Optimized | None = None,
            passes: str | Sequence[Any] | None = "default") -> str:
    """One self-contained HTML page: the graph before and after the pipeline, and every pass."""
    opt = optimized if optimized is not None else optimize(graph, passes)
    title = f"gradc: {graph.name}"
    body = [f"<h1>{_esc(title)}</h1>",
            f"<p>{len(graph.nodes)} nodes before, {len(opt.graph.nodes)} after "
            f"{len(opt.report)} passes.</p>",
            '<h2>Graph</h2><div class="graphs">'
            f'<div id="before"><h3>Before</h3>{drawing(graph)}</div>'
            f'<div id="after"><h3>After</h3>{drawing(opt.graph)}</div></div>',
            f'<h2>Passes</h2><div id="summary">{_summary(opt)}</div>',
            f'<div id="passes">{_pass_details(opt)}</div>']
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def show(graph: Graph, fmt: str = "text", passes: str | Sequence[Any] | None = "default",
         shapes: Mapping[str, int] | None = None) -> str:
    """``gradc show``: the graph as ``text``, ``dot`` or ``html``, before and after ``passes``.

    ``shapes`` sizes symbolic dims in the memory-traffic statistics (1 when not given)."""
    opt = optimize(graph, passes, symbols=shapes) if passes is not None else None
    if fmt == "text":
        return to_text(graph, opt)
    if fmt == "dot":
        return to_dot(graph) if opt is None else to_dot_pair(graph, opt.graph)
    if fmt == "html":
        return to_html(graph, opt if opt is not None else optimize(graph, None, symbols=shapes))
    raise GradcError(f"show: format: expected text, dot or html, got {fmt!r}")

