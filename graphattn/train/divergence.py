"""How a run that diverged is told apart from bad input, and stopped with one clear line: a non-finite
loss, non-finite weights after a step, activations that overflowed inside the model although the
batch is finite, and an auxiliary loss that is not a scalar."""
from __future__ import annotations

from typing import List

import numpy as np
import torch
from torch import Tensor, nn

from graphattn.train.evaluation import Forward

__all__ = ["overflow_named", "diverged", "aux_loss", "check_weights_finite"]


def _float_tensors(obj):
    """The floating-point tensors of a batch (a tensor, a PyG Data/Batch, or lists/dicts of them)."""
    if isinstance(obj, Tensor):
        if obj.is_floating_point():
            yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _float_tensors(o)
    elif isinstance(obj, dict):
        yield from _float_tensors(list(obj.values()))
    elif hasattr(obj, "to_dict"):
        yield from _float_tensors(obj.to_dict())


def _input_tensors(batch) -> List[Tensor]:
    """The floating-point tensors of a batch other than its labels, which may hold NaN (missing)
    by design: a Data's / dict's ``y``, a tuple/list batch's last tensor."""
    if hasattr(batch, "to_dict") and not isinstance(batch, dict):
        batch = batch.to_dict()
    if isinstance(batch, dict):
        return list(_float_tensors({k: v for k, v in batch.items() if k != "y"}))
    if isinstance(batch, (list, tuple)):
        items = batch[:-1] if batch and isinstance(batch[-1], Tensor) else batch
        return [t for it in items for t in (_input_tensors(it) if hasattr(it, "to_dict") else _float_tensors(it))]
    return list(_float_tensors(batch))


def overflow_named(forward: Forward, epoch: int) -> Forward:
    """``forward`` whose "contains NaN or inf" input errors, raised inside the model by a batch
    whose own tensors are finite, become the ``FloatingPointError`` of a diverged model: its
    hidden states overflowed (e.g. ``--lr 1e7``), which the layers' input checks would otherwise
    report as if the user's features held NaN. Labels may hold NaN (missing) and are not
    looked at: a batch's ``y``, a dict's ``"y"``, a tuple/list batch's last tensor (so NaN in the
    last tensor of a tuple that carries no labels passes for a divergence)."""
    def checked(model, batch, split):
        try:
            return forward(model, batch, split)
        except ValueError as exc:
            if " contains NaN" not in str(exc):
                raise
            # the tensor the error names (x, edge_attr) in the batch; else every input tensor of it
            # (PyG batches may pad with NaN on purpose, e.g. Laplacian PE columns past a graph's size)
            name = str(exc).split(" contains NaN", 1)[0].split()[-1]
            named = None if isinstance(batch, (Tensor, list, tuple)) else \
                batch.get(name) if isinstance(batch, dict) else getattr(batch, name, None)
            inputs = [named] if isinstance(named, Tensor) else _input_tensors(batch)
            if not all(bool(torch.isfinite(t).all()) for t in inputs if t.is_floating_point()):
                raise
            raise FloatingPointError(f"the model's activations are not finite at epoch {epoch} ({split}) although "
                                     "the batch is: the model diverged; try a lower learning rate") from exc
    return checked


def diverged(epoch: int, bad) -> None:
    """Stop the run with a ``FloatingPointError``: the training loss of ``epoch`` is not finite (``bad``:
    ``(batch, loss)`` on this rank, or None when another rank saw it)."""
    where = f"batch {bad[0]} (loss {bad[1]})" if bad else "the same step on another rank"
    raise FloatingPointError(f"training loss is not finite at epoch {epoch}, {where}: the model diverged "
                             "(try a lower learning rate) or a batch holds non-finite features")


def aux_loss(aux, device: torch.device) -> Tensor:
    """The auxiliary loss term ``forward`` returned third, as a 0-dim tensor (a Python / NumPy
    number is converted); anything but a scalar is a ``ValueError``."""
    if not isinstance(aux, Tensor) and np.ndim(aux) == 0 and isinstance(aux, (int, float, np.number)):
        aux = torch.as_tensor(float(aux), device=device)
    if not isinstance(aux, Tensor) or aux.numel() != 1:
        raise ValueError("forward returned a third value that is not a scalar: it is added to the loss "
                         "as an auxiliary term; return (logits, y) or (logits, y, scalar_loss), got "
                         f"{tuple(aux.shape) if isinstance(aux, Tensor) else type(aux).__name__}")
    return aux.reshape(())


def check_weights_finite(net: nn.Module, epoch: int) -> None:
    """FloatingPointError when an optimizer step of ``epoch`` made a weight non-finite."""
    params = [p for p in net.parameters() if p.numel()]
    if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):  # one sync
        # the loss of the last step was finite but its update overflowed: say so here rather
        # than let the validation pass fail on non-finite activations
        raise FloatingPointError(f"the model's weights are not finite after epoch {epoch} (an optimizer step "
                                 "overflowed): the model diverged; try a lower learning rate")
