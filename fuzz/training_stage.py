"""The training stage of ``fuzz.pipeline.check_graph``: ``gradc.training_step`` of a graph.

Some floating-point inputs of static shape become parameters (random values), a loss and an
optimizer with random valid hyperparameters are chosen, and the step graph goes through the
whole pipeline (targets compared with the reference). Where the C target may build it, the step
is also compiled with ``update_in_place`` for every parameter, run on copies of the parameter
values, and compared with the reference: a granted output must be the array passed for its
parameter, holding the reference's value.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping

import numpy as np

import gradc
from gradc.check import uses_transcendental
from gradc.ir.core import Graph, Node, Value

from fuzz.common import Finding
from fuzz.graphgen import random_array


def with_parameters(g: Graph, rng: random.Random) -> Graph | None:
    """``g`` with a random non-empty subset of its static floating inputs as parameters."""
    cand = [v for v in g.inputs if v.type.dtype.is_float and v.type.is_static
            and (v.type.size or 0) <= 4096]
    if not cand:
        return None
    chosen = {v for v in cand if rng.random() < 0.6} or {rng.choice(cand)}
    out = Graph(g.name)
    vmap: dict[Value, Value] = {}
    for v in g.inputs:
        if v in chosen:
            value = random_array(rng, list(v.type.shape), v.type.dtype.value)
            vmap[v] = out.add_parameter(v.name, np.nan_to_num(value, posinf=4.0, neginf=-4.0))
        else:
            vmap[v] = out.input(v.name, v.type.dtype, v.type.shape)
    for p in g.parameters:  # an imported model's own parameters stay
        vmap[p] = out.add_parameter(p.name, p.value, p.type)
    for n in g.nodes:
        m = Node(n.op, [vmap[x] for x in n.inputs], n.attrs, [v.type for v in n.outputs],
                 body=n.body.copy() if n.body is not None else None, name=n.name)
        for old, v in zip(n.outputs, m.outputs):
            v.name = old.name
            vmap[old] = v
        out.append(m)
    for v in g.outputs:
        out.add_output(vmap[v])
    return out


def optimizer(rng: random.Random) -> Any:
    """A random optimizer with valid hyperparameters."""
    kind = rng.choice(("sgd", "adam", "adamw"))
    lr = rng.choice((0.0, 1e-3, 0.1, 1.0))
    wd = rng.choice((0.0, 0.0, 0.01))
    if kind == "sgd":
        mom = rng.choice((0.0, 0.5, 0.9))
        nesterov = mom > 0 and rng.random() < 0.3
        damp = 0.0 if nesterov else rng.choice((0.0, 0.0, 0.1))
        return gradc.optim.SGD(lr, momentum=mom, dampening=damp, weight_decay=wd,
                               nesterov=nesterov)
    cls = gradc.optim.Adam if kind == "adam" else gradc.optim.AdamW
    return cls(lr=lr, betas=(rng.choice((0.0, 0.9)), rng.choice((0.5, 0.999))),
               eps=rng.choice((1e-8, 1e-3)), weight_decay=wd)


def loss_for(g: Graph, rng: random.Random) -> str | None:
    """A loss the first output can take (training_step refuses the others: also tried)."""
    first = g.outputs[0]
    options: list[str | None] = ["mse"]
    if first.type.size == 1:
        options.append(None)
    if first.type.rank >= 2:
        options.append("cross_entropy")
    if rng.random() < 0.1:
        options.append(None)  # sometimes a refusal
    return rng.choice(options)


def check_training(g: Graph, opts: Mapping[str, Any], run: Callable[[str, Callable], Any],
                   rng: random.Random, check_graph: Callable[..., Any], c_max_nodes: int,
                   run_limit: int) -> None:
    """The stage (module docstring); ``run`` records refusals as ``Stages.run`` does."""
    if not g.outputs or not g.outputs[0].type.dtype.is_float:
        return
    pg = with_parameters(g, rng)
    if pg is None:
        return
    opt = optimizer(rng)
    step = run("training_step", lambda: gradc.training_step(
        pg, opt, loss=loss_for(pg, rng), seed=rng.getrandbits(64)))
    if step is None:
        return
    # Adam and AdamW divide by the root of the second moment: a gradient that is 0 in exact
    # arithmetic (a bias added to every logit before a softmax) holds rounding noise, which
    # they turn into a step of size lr. onnxruntime rounds differently, so its step is then
    # compared with the reference only for SGD (linear in the gradient); it still runs.
    adaptive = not isinstance(opt, gradc.optim.SGD)
    check_graph(step, {**opts, "grad": False, "onnx_export": False, "api": False,
                       "train": False, "exact_only": adaptive, "seed": rng.getrandbits(32)})
    if not opts.get("c", False) or len(step.nodes) > c_max_nodes or not step.inputs:
        return
    if any(isinstance(d, str) for v in step.inputs for d in v.type.shape):
        return
    if any(p.value is None for p in step.parameters) or sum(
            v.type.size or 0 for v in step.values()) > run_limit:
        return  # as check_graph: run only when every tensor together is small
    wanted = {p.name + ".next": p.name for p in step.parameters}
    exe = run("compile:c-in-place", lambda: gradc.compile(step, "c", update_in_place=wanted))
    ref_exe = run("compile:reference", lambda: gradc.compile(step, "reference"))
    if exe is None or ref_exe is None:
        return
    feeds = {v.name: random_array(rng, list(v.type.shape), v.type.dtype.value)
             for v in step.inputs}
    feeds["step"] = np.array([rng.randint(1, 5)], np.int64)
    mine = {p.name: np.array(p.value, copy=True) for p in step.parameters}
    ref = run("run:reference", lambda: ref_exe(**feeds))
    out = run("run:c-in-place", lambda: exe(**feeds, **mine))
    if ref is None or out is None:
        return
    for o, i in exe.in_place.items():
        if out[o] is not mine[i]:
            raise Finding("mismatch", "c-in-place:alias",
                          f"c in place: output {o!r} is not the array passed for {i!r}")
    from fuzz.pipeline import compare  # lazy: pipeline imports this module
    compare("c", out, ref, approx=uses_transcendental(step))


__all__ = ["check_training"]
