"""Loss and accuracy of a model being trained, measured in inference mode on a dataset.

``gradc train`` measures, after each epoch, the accuracy on the training data and, with
``--val-data``, the loss and accuracy on held-out data. The model runs as ``Trainer.export``
writes it (batch normalization with its running statistics, dropout as identity), compiled once
for the Trainer's target with the loss the training step adds, summed per batch
(``reduction="sum"``): the figure is the mean over every counted label of the data (for
cross entropy the labels that are not ``ignore_index``; for mse every element of ``target``),
which is PyTorch's mean over the whole set, not a mean of batch means. Accuracy is the share of
counted labels whose largest score, along the class axis, is the label's class: for a language
model (``[N, T, V]`` logits, ``[N, T]`` labels) that is token accuracy. As the Trainer's step, the
model is compiled per batch size on the targets that plan memory from sizes (the C target:
``trainer.BINDING_TARGETS``), so the batches of a measure run in one planned arena.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradc.api import compile
from gradc.executable import SizedExecutables
from gradc.ir.losses import mean_squared_error, softmax_cross_entropy
from gradc.ir.types import DType
from gradc.train_data import Batches, DataSpec
from gradc.trainer import BINDING_TARGETS, MAX_SIZES


@dataclass(frozen=True)
class Measure:
    """Mean loss and accuracy (None without class labels) over ``count`` counted labels."""

    loss: float
    accuracy: float | None
    count: int


class Evaluator:
    """The model in inference mode plus its summed loss, compiled once; the Trainer's current
    parameters are passed by name at each call."""

    def __init__(self, trainer: Any, loss: str | None, spec: DataSpec, class_axis: int,
                 target: str, options: dict[str, Any]) -> None:
        g = trainer.inference_graph()
        first = g.outputs[0]
        self.first = first.name
        self.kind = loss
        self.label = spec.label[0] if spec.label is not None else None
        # More than one label per example (a language model's [N, T]): token accuracy.
        self.per_token = spec.label is not None and len(tuple(spec.label[2])) > 1
        self.ignore_index = spec.ignore_index
        self.axis = class_axis % first.type.rank if loss == "cross_entropy" else 0
        self.sum_name = None
        if loss is not None:
            assert spec.label is not None
            name, dtype, shape = spec.label
            lab = g.input(name, DType.of(dtype), shape)
            with g:
                if loss == "cross_entropy":
                    total = softmax_cross_entropy(first, lab, reduction="sum",
                                                  ignore_index=spec.ignore_index,
                                                  class_axis=self.axis)
                else:
                    total = mean_squared_error(first, lab, reduction="sum")
            self.sum_name = g.output(total).name
        options = dict(options)
        shapes = options.pop("shapes", None)
        self.compiled = SizedExecutables(
            g, lambda sizes: compile(g, target, shapes=sizes, **options), shapes,
            MAX_SIZES if target in BINDING_TARGETS else 0)
        self.names = [p.name for p in g.parameters]

    def measure(self, trainer: Any, batches: Batches) -> Measure:
        """The mean loss and the accuracy over every batch of ``batches``' epoch 0."""
        values = trainer.parameters
        params = {n: values[n] for n in self.names if n in values}
        loss_sum, count, right = 0.0, 0, 0
        for batch in batches.epoch_batches(0):
            out = self.compiled.select(batch)(**batch, **params)
            if self.sum_name is None:  # the model's own loss: a mean per batch
                n = len(next(iter(batch.values())))
                loss_sum += float(np.asarray(out[self.first], np.float64).reshape(-1)[0]) * n
                count += n
                continue
            loss_sum += float(np.asarray(out[self.sum_name], np.float64))
            target = batch[self.label]  # type: ignore[index]
            if self.kind != "cross_entropy":
                count += target.size
                continue
            counted = np.ones(target.shape, bool) if self.ignore_index is None \
                else target != self.ignore_index
            count += int(counted.sum())
            pred = out[self.first].argmax(axis=self.axis)
            right += int(np.sum((pred == target) & counted))
        mean = loss_sum / count if count else math.nan
        accuracy = (right / count if count else math.nan) \
            if self.kind == "cross_entropy" else None
        return Measure(mean, accuracy, count)


__all__ = ["Evaluator", "Measure"]
