"""Node <-> padded ``(B, L, ...)`` layout for per-graph dense work (global attention variants).

Global attention variants (linear, key-reduced, synthesizer) work on each graph of a batch
as a dense block. :class:`GraphLayout` maps the ``N`` nodes of a PyG batch to
``(graph, position)`` slots of a ``(B, L, ...)`` array (``L`` = largest graph), where a
node's position is its rank among the nodes of its graph in node order (so the token order
of a sequence, and global tokens appended after all nodes still land after their graph's
nodes). The ``batch`` vector need not be sorted. When it is sorted and all graphs have the
same size, :meth:`GraphLayout.pad` and :meth:`GraphLayout.unpad` are free views.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from graphattn.utils.memo import recall, remember
from graphattn.utils.validation import check_int

__all__ = ["GraphLayout", "graph_layout", "check_batch"]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def check_batch(batch: Tensor, num_nodes: int, num_graphs: Optional[int] = None,
                check_range: bool = True) -> Optional[int]:
    """Check a PyG ``batch`` vector and return the number of graphs B.

    ``batch`` must be an integer ``(num_nodes,)`` tensor of graph ids ``>= 0``; ``num_graphs``
    (default ``batch.max() + 1``, or 1 for no nodes) must be an int larger than every id
    (trailing empty graphs are allowed: ``num_graphs`` may exceed ``batch.max() + 1``).

    ``check_range=False`` checks only type and shape (no device sync) and returns
    ``num_graphs`` as given. Raises ``ValueError`` naming ``batch`` / ``num_graphs`` otherwise.
    The id range is read once per ``batch`` tensor (one device sync) and remembered for it
    (:mod:`graphattn.utils.memo`), so later calls with the same tensor read nothing.
    """
    if not isinstance(batch, Tensor) or batch.dtype not in _INT_DTYPES:
        raise TypeError(f"batch must be an integer tensor of shape ({num_nodes},) (graph id per node), got "
                        f"{batch.dtype if isinstance(batch, Tensor) else type(batch).__name__}")
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise ValueError(f"batch must have shape ({num_nodes},) (one graph id per node), got {tuple(batch.shape)}")
    if num_graphs is not None:
        num_graphs = check_int("num_graphs", num_graphs, 0)  # int, numpy or 0-d integer tensor
    if not check_range or (num_graphs is not None and torch.compiler.is_compiling()):  # value checks: eager only
        return num_graphs
    if num_nodes == 0:
        return 1 if num_graphs is None else num_graphs
    hi = recall("largest graph id", batch)
    if hi is None:
        lo, hi = torch.stack(torch.aminmax(batch)).tolist()  # one device sync per batch tensor
        if lo < 0:
            raise ValueError(f"batch contains negative graph ids (min {lo})")
        remember("largest graph id", hi, batch)
    if num_graphs is None:
        return hi + 1
    if hi >= num_graphs:
        raise ValueError(f"num_graphs={num_graphs} but batch holds graph id {hi} "
                         f"(num_graphs must be at least batch.max() + 1 = {hi + 1})")
    return num_graphs


class GraphLayout:
    """Where every node of a batch sits in a padded ``(B, L)`` grid.

    Building one from a ``batch`` reads it (sortedness, sizes, L: device syncs); per-call code
    uses :func:`graph_layout`, which builds it once per ``batch`` tensor.

    Args:
        batch: ``(N,)`` graph id of every node (any order), or None for one graph.
        num_nodes: N (needed when ``batch`` is None).
        num_graphs: B (default: ``batch.max() + 1``); empty graphs are allowed.
        check_range: with ``num_graphs`` given, ``False`` skips the scan of ``batch`` for ids
            outside ``[0, num_graphs)`` (a caller that checked it already, e.g. a model's forward).

    Attributes:
        graph ``(N,)``, pos ``(N,)`` slot of each node; sizes ``(B,)``; ``mask`` ``(B, L)``
        True at occupied slots; ``B``, ``L``; ``regular`` (a free view is possible).
    """

    def __init__(self, batch: Optional[Tensor], num_nodes: int, num_graphs: Optional[int] = None,
                 device=None, *, check_range: bool = True):
        if batch is None:
            device = device if device is not None else "cpu"
            self.graph = torch.zeros(num_nodes, dtype=torch.long, device=device)
            self.pos = torch.arange(num_nodes, device=device)
            self.sizes = torch.full((1,), num_nodes, dtype=torch.long, device=device)
            self.regular = True
            self.L = num_nodes  # from the size: no read of `sizes`
        else:
            B = check_batch(batch, num_nodes, num_graphs, check_range=check_range or num_graphs is None)
            batch = batch.long()
            self.graph = batch
            self.sizes = torch.bincount(batch, minlength=B)
            is_sorted = num_nodes < 2 or bool((batch[1:] >= batch[:-1]).all())
            start = torch.cumsum(self.sizes, 0) - self.sizes  # (B,) first slot of each graph
            if is_sorted:
                self.pos = torch.arange(num_nodes, device=batch.device) - start[batch]
            else:  # rank within graph in node order
                order = torch.argsort(batch, stable=True)
                self.pos = torch.empty_like(batch)
                self.pos[order] = torch.arange(num_nodes, device=batch.device) - start[batch[order]]
            self.regular = is_sorted and (B == 0 or bool((self.sizes == self.sizes[0]).all()))
            self.L = int(self.sizes.max()) if num_nodes else 0
        self.N = num_nodes
        self.B = int(self.sizes.numel())
        self.mask = torch.arange(self.L, device=self.sizes.device)[None, :] < self.sizes[:, None]  # (B, L)

    def pad(self, t: Tensor, value: float = 0.0) -> Tensor:
        """``(N, *F)`` -> ``(B, L, *F)``, empty slots filled with ``value``."""
        if self.regular:
            return t.reshape(self.B, self.L, *t.shape[1:])
        out = t.new_full((self.B, self.L, *t.shape[1:]), value)
        out[self.graph, self.pos] = t
        return out

    def unpad(self, t: Tensor) -> Tensor:
        """``(B, L, *F)`` -> ``(N, *F)`` (the occupied slots, in node order)."""
        if self.regular:
            return t.reshape(self.N, *t.shape[2:])
        return t[self.graph, self.pos]


def graph_layout(batch: Optional[Tensor], num_nodes: int, num_graphs: Optional[int] = None, device=None, *,
                 check_range: bool = True) -> GraphLayout:
    """:class:`GraphLayout` ``(batch, num_nodes, num_graphs, device, check_range=...)``, built once
    per ``batch`` tensor and remembered for it (:mod:`graphattn.utils.memo`): a second call with
    the same ``batch`` reads nothing from the device. Without ``batch`` (one graph) nothing is read."""
    if batch is None:
        return GraphLayout(None, num_nodes, num_graphs, device, check_range=check_range)
    num_graphs = check_batch(batch, num_nodes, num_graphs, check_range=check_range or num_graphs is None)
    tag = ("graph layout", num_nodes, num_graphs)  # the ids were read once above, if at all
    layout = recall(tag, batch)
    if layout is None:
        # a copy of batch: a layout holding the tensor it is remembered for would keep it alive
        layout = remember(tag, GraphLayout(batch.clone(), num_nodes, num_graphs, device, check_range=False), batch)
    return layout
