"""The training stage of ``fuzz.pipeline.check_graph``: ``gradc.training_step`` of a graph.

Some floating-point inputs of static shape become parameters (random values), a loss and an
optimizer with random valid hyperparameters are chosen, with the options of SPEC-transformers
§29 now and then (``class_axis``, ``ignore_index``, ``max_grad_norm``, a ``WarmupLinear`` or
``WarmupCosine`` schedule, ``parameters``/``frozen`` as names or fnmatch patterns; boundary and
invalid values too, which must be refused with a ``GradcError``), and the step graph goes
through the whole pipeline (targets compared with the reference). Where the C target may build
it, the step is also compiled with ``update_in_place`` for every parameter, run on copies of
the parameter values, and compared with the reference: a granted output must be the array
passed for its parameter, holding the reference's value; a run that raises ``InputError`` (an
index out of range) must leave them as they were. Now and then a ``gradc.Trainer`` takes one
step on random data: an ``InputError`` (a bad label, an index out of range, a NaN) must leave
its whole state as it was.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Mapping

import numpy as np

import gradc
from gradc.check import uses_transcendental
from gradc.ir.core import Graph, Node, Value

from fuzz.common import Finding
from fuzz.graphgen import random_array
from fuzz.tolerance import index_feeds


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
    """A random optimizer with valid hyperparameters (and now and then a schedule)."""
    kind = rng.choice(("sgd", "adam", "adamw"))
    lr = rng.choice((0.0, 1e-3, 0.1, 1.0))
    wd = rng.choice((0.0, 0.0, 0.01))
    sched = schedule(rng) if rng.random() < 0.3 else None
    if kind == "sgd":
        mom = rng.choice((0.0, 0.5, 0.9))
        nesterov = mom > 0 and rng.random() < 0.3
        damp = 0.0 if nesterov else rng.choice((0.0, 0.0, 0.1))
        return gradc.optim.SGD(lr, momentum=mom, dampening=damp, weight_decay=wd,
                               nesterov=nesterov, schedule=sched)
    cls = gradc.optim.Adam if kind == "adam" else gradc.optim.AdamW
    return cls(lr=lr, betas=(rng.choice((0.0, 0.9)), rng.choice((0.5, 0.999))),
               eps=rng.choice((1e-8, 1e-3)), weight_decay=wd, schedule=sched)


def schedule(rng: random.Random) -> Any:
    """``WarmupLinear`` or ``WarmupCosine`` (SPEC-transformers §29.3), valid mostly; now and
    then a total below the warmup, a negative count, 2^53 or a float (a VerifyError)."""
    cls = rng.choice((gradc.optim.WarmupLinear, gradc.optim.WarmupCosine))
    w = rng.choice((0, 0, 1, 2, 3, 10))
    t = w + rng.choice((0, 1, 2, 5, 100))
    if rng.random() < 0.1:
        w, t = rng.choice(((3, 2), (-1, 5), (0, 0), (0, 2 ** 53), (1.0, 4), (True, 3),
                           (0, 2 ** 63)))
    return cls(w, t)


def step_options(pg: Graph, loss: str | None, rng: random.Random) -> dict[str, Any]:
    """``training_step``'s options of SPEC-transformers §29 (see the module docstring)."""
    opts: dict[str, Any] = {}
    rank = pg.outputs[0].type.rank
    if loss == "cross_entropy" and rank >= 2 and rng.random() < 0.4:
        axis = rng.randrange(rank)
        opts["class_axis"] = axis - rank if rng.random() < 0.4 else axis
        if rng.random() < 0.05:
            opts["class_axis"] = rng.choice((rank, -rank - 1, 1.0, True, None, 2 ** 63))
    if loss == "cross_entropy" and rng.random() < 0.3:
        opts["ignore_index"] = rng.choice((-100, 0, 1, -1, 2 ** 63 - 1, 2 ** 63, 1.5, True))
    if rng.random() < 0.25:
        opts["max_grad_norm"] = rng.choice((1.0, 0.5, 1e-3, 1e10, 1, 0.0, -1.0, math.nan,
                                            math.inf, "1", True, 1e-45))
    if rng.random() < 0.3:
        opts.update(patterns(pg, rng))
    return opts


def patterns(pg: Graph, rng: random.Random) -> dict[str, Any]:
    """``parameters`` and ``frozen`` as names and fnmatch patterns (SPEC-transformers §29.4),
    now and then one that matches nothing (a VerifyError naming it)."""
    names = [p.name for p in pg.parameters]
    pick = rng.choice(names)

    def one() -> Any:
        return rng.choice((pick, "*", pick[:1] + "*", "?" * len(pick), f"[{pick[:1]}]*",
                           f"[!{pick[:1]}]*", pick + "*", "nope*", "", "[", pick.upper(),
                           "**", "*" + pick[-1:]))

    out: dict[str, Any] = {}
    if rng.random() < 0.7:
        out["parameters"] = [one() for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        out["frozen"] = [one() for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.05:
        out["parameters"] = rng.choice(("*", [], [3], None, [pick, pick]))
    return out


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


def check_trainer(pg: Graph, opt: Any, loss: str | None, options: Mapping[str, Any],
                  run: Callable[[str, Callable], Any], rng: random.Random) -> None:
    """One ``Trainer.step`` on random data (numpy or reference target): an ``InputError``
    leaves the whole state as it was (SPEC-transformers §26.3, ``Trainer.step``)."""
    target = rng.choice(("numpy", "reference"))
    bind = {d: 2 for v in pg.inputs for d in v.type.shape if isinstance(d, str)}
    if sum(math.prod(bind.get(d, 2) if isinstance(d, str) else d for d in v.type.shape)
           for v in list(pg.inputs) + list(pg.outputs)) > 100_000:
        return  # as check_graph: random data only when it is small
    trainer = run("trainer", lambda: gradc.Trainer(pg, opt, loss=loss, target=target,
                                                   **options))
    if trainer is None:
        return
    first = pg.outputs[0]
    batch: dict[str, np.ndarray] = {}
    for v in pg.inputs:
        shape = [bind.get(d, 2) if isinstance(d, str) else d for d in v.type.shape]
        batch[v.name] = random_array(rng, shape, v.type.dtype.value)
    index_feeds(pg, batch, bind, rng)
    names = trainer.batch_names
    if "labels" in names or "target" in names:
        shape = [bind.get(d, 2) if isinstance(d, str) else d for d in first.type.shape]
        if "labels" in names:
            axis = options.get("class_axis", 1)
            axis = axis % len(shape) if isinstance(axis, int) and shape else 0
            classes = shape.pop(axis) if shape else 1
            nrng = np.random.default_rng(rng.getrandbits(32))
            labels = nrng.integers(0, classes, shape).astype(np.int64)
            if labels.size and rng.random() < 0.3:
                labels.reshape(-1)[rng.randrange(labels.size)] = rng.choice(
                    (classes, -1, -100, 2 ** 62))
            batch["labels"] = labels
        else:
            batch["target"] = random_array(rng, shape, first.type.dtype.value)
    before = trainer.state_dict()
    try:
        trainer.step(**{k: batch[k] for k in names if k in batch})
    except gradc.InputError:
        after = trainer.state_dict()
        for k, v in before.items():
            if not np.array_equal(after[k], v, equal_nan=True):
                raise Finding("input-modified", "trainer:refused", f"Trainer.step raised "
                              f"InputError but changed its state {k!r}") from None
    except gradc.GradcError:
        pass


def check_training(g: Graph, opts: Mapping[str, Any], run: Callable[[str, Callable], Any],
                   rng: random.Random, check_graph: Callable[..., Any], c_max_nodes: int,
                   run_limit: int) -> None:
    """The stage (module docstring); ``run`` records refusals as ``Stages.run`` does."""
    if not g.outputs or not g.outputs[0].type.dtype.is_float:
        return
    pg = with_parameters(g, rng)
    if pg is None:
        return
    opt = run("optimizer", lambda: optimizer(rng))
    if opt is None:
        return
    loss = loss_for(pg, rng)
    options = step_options(pg, loss, rng)
    seed = rng.getrandbits(64)
    step = run("training_step", lambda: gradc.training_step(pg, opt, loss=loss, seed=seed,
                                                            **options))
    if step is None:
        return
    if rng.random() < 0.3:
        check_trainer(pg, opt, loss, options, run, rng)
    # Adam and AdamW divide by the root of the second moment: a gradient that is 0 in exact
    # arithmetic (a bias added to every logit before a softmax) holds rounding noise, which
    # they turn into a step of size lr. onnxruntime rounds differently, and so does the C
    # library's exp or log in the last place, so a step is then compared with the reference
    # only for SGD (linear in the gradient) or where it is bit for bit; it still runs.
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
    index_feeds(step, feeds, {}, rng)
    mine = {p.name: np.array(p.value, copy=True) for p in step.parameters}
    ref = run("run:reference", lambda: ref_exe(**feeds))
    out = run("run:c-in-place", lambda: exe(**feeds, **mine))
    if out is None:
        for p in step.parameters:  # §26.3: a target that updates in place checks first
            if not np.array_equal(mine[p.name], p.value, equal_nan=True):
                raise Finding("input-modified", "c-in-place:refused",
                              f"c in place: the call refused its input but changed "
                              f"parameter {p.name!r}")
    if ref is None or out is None:
        return
    for o, i in exe.in_place.items():
        if out[o] is not mine[i]:
            raise Finding("mismatch", "c-in-place:alias",
                          f"c in place: output {o!r} is not the array passed for {i!r}")
    from fuzz.pipeline import compare  # lazy: pipeline imports this module
    if adaptive and uses_transcendental(step):
        return  # the C library's last bits, magnified by Adam (see above)
    compare("c", out, ref, approx=uses_transcendental(step))


__all__ = ["check_training"]
