"""What the PyG-named convs share: their ``**kwargs`` (PyG's ``MessagePassing`` options) and
the attention weights packed into a sparse adjacency, as PyG's GATConv returns them."""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor
from torch_geometric.utils.sparse import set_sparse_value

from graphattn.functional import EDGE_IMPLS

__all__ = ["conv_options", "sparse_weights"]

_SUM = ("add", "sum")
_SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def conv_options(cls_name: str, kwargs: dict) -> str:
    """Check the ``**kwargs`` a PyG conv forwards to ``MessagePassing`` and return the edge
    attention backend ``impl`` (our one extra keyword, default ``"auto"``, see
    :func:`graphattn.functional.edge_attention`). PyG's options are honoured where they leave the
    result unchanged (``aggr="add"|"sum"``, ``flow="source_to_target"``, ``decomposed_layers``:
    the attention runs in one pass anyway); others raise, naming them."""
    kwargs = dict(kwargs)
    impl = kwargs.pop("impl", "auto")
    if impl not in EDGE_IMPLS:
        raise ValueError(f"impl must be one of {EDGE_IMPLS}, got {impl!r}")
    aggr = kwargs.pop("aggr", "add")
    if not isinstance(aggr, str) or aggr not in _SUM:
        raise NotImplementedError(f"{cls_name}(aggr={aggr!r}): the attention kernels sum the weighted messages; "
                                  f"only aggr='add' (PyG's default) is supported")
    if kwargs.pop("aggr_kwargs", None):
        raise NotImplementedError(f"{cls_name}(aggr_kwargs=...): the sum aggregation takes no options")
    flow = kwargs.pop("flow", "source_to_target")
    if flow != "source_to_target":
        raise NotImplementedError(f"{cls_name}(flow={flow!r}): only flow='source_to_target' is supported; "
                                  "flip the edge_index (edge_index.flip(0)) for the other direction")
    if "node_dim" in kwargs:
        raise TypeError(f"{cls_name}() got multiple values for keyword argument 'node_dim' (it is 0, as in PyG)")
    decomposed = kwargs.pop("decomposed_layers", 1)
    if not isinstance(decomposed, int) or decomposed < 1:
        raise ValueError(f"decomposed_layers must be a positive int, got {decomposed!r}")
    if kwargs:
        raise TypeError(f"{cls_name}() got unexpected keyword arguments {sorted(kwargs)}")
    return impl


def sparse_weights(edge_index: Tensor, alpha: Tensor) -> Tuple[Tensor, Tensor]:
    """``(edge_index, alpha)`` as PyG's GATConv / GATv2Conv return it: for a torch.sparse
    ``adj_t`` the adjacency with ``alpha`` ``(E, H)`` as its values (``(N, N_src, H)``), then ``alpha``."""
    if isinstance(edge_index, Tensor) and edge_index.layout in _SPARSE_LAYOUTS:
        return set_sparse_value(edge_index, alpha), alpha
    return edge_index, alpha
