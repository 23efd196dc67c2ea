"""Time and memory of the tiny inputs that declare huge tensors (issue 10's reproducers).

Each case runs in a fresh child process under a 4 GiB address-space limit; the table gives the
wall time of the case itself (imports excluded), the child's peak resident memory (imports
included: a bare ``import gradc`` with NumPy, onnx and onnxruntime is most of it), and the
outcome: the GradcError it was refused with, or what it computed. Run from the repository root:

    python benchmarks/hostile_inputs.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap

LIMIT = 4 << 30

CHILD = """
import json, resource, sys, time
import numpy as np, onnx, gradc
from gradc import ops
from onnx import TensorProto, helper
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter(); result = None
try:
    exec(compile(sys.stdin.read(), "case", "exec"))
    outcome = "ok: " + str(result)
except gradc.GradcError as e:
    outcome = f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
except BaseException as e:  # noqa: BLE001 - reported, that is the point
    outcome = f"NOT A GradcError: {type(e).__name__}: {e}"[:120]
print(json.dumps({"seconds": time.perf_counter() - t0, "outcome": outcome, "rss0": rss0,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

RESIZE_2_31 = """
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 2])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
sizes = helper.make_tensor("s", TensorProto.INT64, [4], [1, 1, 1, 2 ** 31])
node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode="nearest")
m = helper.make_model(helper.make_graph([node], "g", [x], [y], [sizes]),
                      opset_imports=[helper.make_opsetid("", 19)])
"""

CASES = {
    "C1 resample of a 1x1 constant by 2**32, optimize": """
        g = gradc.Graph("g"); g.input("x", "f32", [1])
        c = ops.constant(np.ones((1, 1), np.float32), graph=g)
        g.output(ops.resample(c, scales=[4294967296.0, 4294967296.0]))
        result = [n.op for n in gradc.optimize(g).graph.nodes]
    """,
    "C1 ONNX Resize to width 2**31 (117-byte model), to_onnx": RESIZE_2_31 + """
result = len(gradc.to_onnx(gradc.from_onnx(m.SerializeToString())).SerializeToString())
""",
    "C1 the same, compiled to C": RESIZE_2_31 + """
from gradc.api import artifact
result = f"{len(artifact(gradc.from_onnx(m.SerializeToString()), 'c'))} bytes of C"
""",
    "C2 max_pooling_grad 3x3 on f32[1,1,4,2**40], compile -t c": """
        g = gradc.parse('''graph g(%x: f32[1,1,4,1099511627776], %dy: f32[1,1,2,1099511627774]) {
          %dx = max_pooling_grad(%x, %dy) {window_size = [3, 3]} : f32[1,1,4,1099511627776]
          return %dx
        }''')
        result = f"{len(gradc.compile(g, target='c').source)} bytes of C"
    """,
    "C3 the same, to_onnx": """
        g = gradc.parse('''graph g(%x: f32[1,1,4,1099511627776], %dy: f32[1,1,2,1099511627774]) {
          %dx = max_pooling_grad(%x, %dy) {window_size = [3, 3]} : f32[1,1,4,1099511627776]
          return %dx
        }''')
        result = f"{len(gradc.to_onnx(g).SerializeToString())} bytes of ONNX"
    """,
    "C4 max_pooling window [2**40, 2] on 8x8, run (reference)": """
        g = gradc.Graph("g"); x = g.input("x", "f32", [1, 1, 8, 8])
        g.output(ops.max_pooling(x, window_size=[2 ** 40, 2], output_sizes=[1, 4]))
        a = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
        result = gradc.compile(g, target="reference")(x=a)[g.outputs[0].name].ravel().tolist()
    """,
    "C4 the same on the numpy target": """
        g = gradc.Graph("g"); x = g.input("x", "f32", [1, 1, 8, 8])
        g.output(ops.max_pooling(x, window_size=[2 ** 40, 2], output_sizes=[1, 4]))
        a = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
        result = gradc.compile(g, target="numpy")(x=a)[g.outputs[0].name].ravel().tolist()
    """,
    "C5 max_pooling_grad stride 2**31 on the C target, run": """
        g = gradc.Graph("g"); x = g.input("x", "f32", [1, 1, 8, 8])
        dy = g.input("dy", "f32", [1, 1, 1, 1])
        g.output(ops.max_pooling_grad(x, dy, window_size=[2, 2], strides=[2 ** 31, 2 ** 31]))
        a = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
        r = gradc.compile(g, target="c")(x=a, dy=np.ones((1, 1, 1, 1), np.float32))
        result = float(r[g.outputs[0].name].sum())
    """,
    "D1 array literal of 2**62 x 4 elements, parse": """
        huge = "f32[4611686018427387904,4]"
        gradc.parse(f'''graph g(%x: f32[1]) {{
          %w = constant() {{value = array<{huge}: []>}} : {huge}
          return %w
        }}''')
    """,
    "D3 reshape to [2**32, 2**32, -1]": """
        g = gradc.Graph("g"); x = g.input("x", "f32", [2, 3])
        ops.reshape(x, shape=[4294967296, 4294967296, -1])
    """,
    "D5 slice_grad of a constant to [2**62, 4], optimize": """
        g = gradc.Graph("g"); g.input("x", "f32", [1])
        c = ops.constant(np.ones((1, 4), np.float32), graph=g)
        g.output(ops.slice_grad(c, output_sizes=[2 ** 62, 4], input_window_offsets=[0, 0],
                                input_window_sizes=[1, 4], input_window_strides=[1, 1]))
        result = [n.op for n in gradc.optimize(g).graph.nodes]
    """,
    "D6 expand of a constant onto f32[2**30, 2**30], to_onnx": """
        g = gradc.parse('''graph g(%x: f32[1073741824,1073741824]) {
          %c = constant() {value = array<f32[1,1]: [1.0]>} : f32[1,1]
          %y = expand(%c, %x) : f32[1073741824,1073741824]
          return %y
        }''')
        result = [n.op_type for n in gradc.to_onnx(g).graph.node]
    """,
    "D7 ONNX MaxPool pads [2**62]*4, import and to_onnx": """
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[2 ** 62] * 4)
        m = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 19)])
        result = len(gradc.to_onnx(gradc.from_onnx(m.SerializeToString())).SerializeToString())
    """,
    "D8 ONNX MaxPool strides [0, 2] ceil_mode 1, import": """
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[0, 2],
                                ceil_mode=1)
        m = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 19)])
        gradc.from_onnx(m.SerializeToString())
    """,
    "D11 a 2**40-row broadcast view into f32[N,3], call (numpy)": """
        g = gradc.Graph("g"); x = g.input("x", "f32", ["N", 3]); g.output(ops.relu(x))
        big = np.broadcast_to(np.ones((1, 3), np.float32), (2 ** 40, 3))
        gradc.compile(g, target="numpy")(x=big)
    """,
    "D11 a 2x2 input resampled by 1e6, run (reference)": """
        g = gradc.Graph("g"); x = g.input("x", "f32", [1, 1, 2, 2])
        g.output(ops.resample(x, scales=[1.0, 1.0, 1e6, 1e6]))
        gradc.compile(g, target="reference")(x=np.ones((1, 1, 2, 2), np.float32))
    """,
}


def run_case(code: str) -> dict:
    """Run one case in a child under LIMIT bytes of address space."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    p = subprocess.run([sys.executable, "-c", CHILD], input=textwrap.dedent(code), text=True,
                       capture_output=True, timeout=600, preexec_fn=limit)
    if p.returncode != 0:
        return {"seconds": float("nan"), "rss": 0, "rss0": 0,
                "outcome": f"child died ({p.returncode}): {p.stderr.strip()[-100:]}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    """Print one row per case."""
    print(f"{'case':58} {'ms':>8} {'peak MiB':>9} {'+MiB':>6}  outcome")
    for name, code in CASES.items():
        r = run_case(code)
        grown = (r["rss"] - r["rss0"]) / 1024
        print(f"{name:58} {r['seconds'] * 1e3:8.1f} {r['rss'] / 1024:9.0f} {grown:6.0f}  "
              f"{r['outcome']}", flush=True)


if __name__ == "__main__":
    main()
