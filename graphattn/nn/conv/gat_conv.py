"""GATConv: PyG's graph attention conv (Veličković et al. 2018), computed by our kernels."""
from __future__ import annotations

from typing import Optional, Tuple, Union

from torch import Tensor

from graphattn.nn.attention import GraphSelfAttention
from graphattn.nn.conv.pyg_api import conv_options, sparse_weights

__all__ = ["GATConv"]


class GATConv(GraphSelfAttention):
    r"""The graph attentional operator of "Graph Attention Networks" (Veličković et al. 2018),
    with the constructor, ``forward``, return values, parameters and ``repr`` of PyG 2.8's
    ``torch_geometric.nn.GATConv``: ``from graphattn.nn import GATConv`` is the only change.

    .. math::
        \alpha_{ij} = \operatorname{softmax}_j\big(\mathrm{LeakyReLU}(
            \mathbf{a}_s^\top \Theta_s x_j + \mathbf{a}_t^\top \Theta_t x_i
            [+ \mathbf{a}_e^\top \Theta_e e_{ij}])\big),\qquad
        x'_i = \textstyle\sum_{j \in \mathcal{N}(i) \cup \{i\}} \alpha_{ij} \Theta_s x_j
            \;[+ \Theta_r x_i] + b

    (:math:`\Theta_s = \Theta_t` unless ``in_channels`` is a pair). It is
    :class:`~graphattn.nn.attention.GraphSelfAttention` with ``score="gat"``: the per-node
    scalars :math:`\mathbf{a}^\top\Theta x` ``(N, H)`` and the edge term ``(E, H)`` make the
    scores, which the fused kernel (C++ on CPU, Triton on CUDA, chunked PyTorch elsewhere) takes
    as an ``(E, H)`` score bias for the softmax and the aggregation; no ``(E, H, C)`` tensor is
    formed. Self-loops are added as PyG adds them, once per graph (cached per ``edge_index``).

    Args:
        in_channels (int or tuple): input size, ``-1`` (lazy) or ``(F_src, F_dst)`` (bipartite).
        out_channels (int): channels per head C.
        heads (int, default 1): number of heads H.
        concat (bool, default True): concatenate the heads (else average them).
        negative_slope (float, default 0.2): LeakyReLU slope.
        dropout (float, default 0.0): dropout on the attention weights in training, drawn as
            PyG draws it (``F.dropout`` on ``alpha`` in edge order).
        add_self_loops (bool, default True): remove the input's self-loops and add one per node.
        edge_dim (int, optional): edge feature size D.
        fill_value (float, Tensor or str, default "mean"): edge features of the added loops.
        bias (bool, default True): a learnable output bias.
        residual (bool, default False): a learnable skip connection ``res`` (no bias).
        **kwargs: PyG's ``MessagePassing`` options that leave the result unchanged
            (``aggr="add"``, ``flow="source_to_target"``, ``decomposed_layers``), and ``impl``
            (edge attention backend, default ``"auto"``, see :func:`graphattn.functional.edge_attention`).

    Shapes:
        - input: x ``(N, F)`` or ``((N_s, F_s), (N_t, F_t))`` (``x_t`` may be None: then
          ``size=(N_s, N_t)`` gives the targets), edge_index ``(2, E)`` or a torch.sparse
          ``adj_t`` ``(N_t, N_s)``, edge_attr ``(E, D)`` (ignored without ``edge_dim``, as in PyG)
        - output: ``(N_t, H*C)`` (``(N_t, C)`` with ``concat=False``); with a truthy
          ``return_attention_weights`` also ``(edge_index, alpha)``: the looped ``(2, E')``
          edge_index (or the ``adj_t`` with ``alpha`` as values, ``(N_t, N_s, H)``) and alpha
          ``(E', H)``, after dropout, with a gradient.

    Example::

        >>> import torch
        >>> from graphattn.nn import GATConv
        >>> x, edge_index = torch.randn(4, 16), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        >>> conv = GATConv(16, 8, heads=2)                         # adds a self-loop per node, as PyG
        >>> out, (ei, alpha) = conv(x, edge_index, return_attention_weights=True)
        >>> out.shape, ei.shape, alpha.shape                        # 4 edges + 4 loops
        (torch.Size([4, 16]), torch.Size([2, 8]), torch.Size([8, 2]))
    """

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, edge_dim: Optional[int] = None,
                 fill_value: Union[float, Tensor, str] = 'mean', bias: bool = True, residual: bool = False,
                 **kwargs):
        impl = conv_options(type(self).__name__, kwargs)
        super().__init__(in_channels, out_channels, heads=heads, concat=concat, dropout=dropout,
                         edge_dim=edge_dim, bias=False, score="gat", root_weight=False,
                         negative_slope=negative_slope, impl=impl, add_self_loops=add_self_loops,
                         fill_value=fill_value, residual=residual, out_bias=bias, weights_grad=True)

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                edge_attr: Optional[Tensor] = None, size: Optional[Tuple[int, int]] = None,
                return_attention_weights: Optional[bool] = None):
        """``out``, or ``(out, (edge_index, alpha))`` when ``return_attention_weights`` is truthy
        (PyG's GATConv convention; see the class docstring)."""
        if self.lin_edge is None:
            edge_attr = None  # PyG's GATConv ignores edge features when it has no edge_dim
        want = bool(return_attention_weights)
        res = super().forward(x, edge_index, edge_attr, want, size=size)
        return (res[0], sparse_weights(*res[1])) if want else res
