"""GATv2Conv: PyG's GATv2 conv (Brody et al. 2022), computed by our kernels."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor, nn
from torch_geometric.nn.inits import glorot, zeros

from graphattn.nn.attention import GraphSelfAttention
from graphattn.nn.attention.projections import channel_pair, empty_modules, glorot_linear
from graphattn.nn.conv.pyg_api import conv_options, sparse_weights

__all__ = ["GATv2Conv"]


class GATv2Conv(GraphSelfAttention):
    r"""The GATv2 operator of "How Attentive are Graph Attention Networks?" (Brody et al. 2022),
    with the constructor, ``forward``, return values, parameters and ``repr`` of PyG 2.8's
    ``torch_geometric.nn.GATv2Conv``: ``from graphattn.nn import GATv2Conv`` is the only change.

    .. math::
        \alpha_{ij} = \operatorname{softmax}_j\big(\mathbf{a}^\top \mathrm{LeakyReLU}(
            \Theta_r x_i + \Theta_l x_j [+ \Theta_e e_{ij}])\big),\qquad
        x'_i = \textstyle\sum_{j \in \mathcal{N}(i) \cup \{i\}} \alpha_{ij} \Theta_l x_j
            \;[+ \Theta_{res} x_i] + b

    It is :class:`~graphattn.nn.attention.GraphSelfAttention` with ``score="additive"``, whose
    scores run in the chunked kernel (bounded ``(chunk, H, C)`` temporaries, recomputing
    backward): the fused kernels have no additive score, so on small graphs PyG's GATv2Conv is
    faster, on large ones this is (and needs a fraction of the memory). With dropout in training
    the weights are scored first, dropped as PyG drops them (``F.dropout`` in edge order) and
    then aggregated.

    Args:
        in_channels (int or tuple): input size, ``-1`` (lazy) or ``(F_src, F_dst)`` (bipartite).
        out_channels (int): channels per head C.
        heads (int, default 1): number of heads H.
        concat (bool, default True): concatenate the heads (else average them).
        negative_slope (float, default 0.2): LeakyReLU slope.
        dropout (float, default 0.0): dropout on the attention weights in training (``F.dropout``
            on ``alpha`` in edge order, as PyG).
        add_self_loops (bool, default True): remove the input's self-loops and add one per node.
        edge_dim (int, optional): edge feature size D.
        fill_value (float, Tensor or str, default "mean"): edge features of the added loops.
        bias (bool, default True): biases of ``lin_l`` / ``lin_r`` and a learnable output bias.
        share_weights (bool, default False): one projection for sources and targets (``lin_r is lin_l``).
        residual (bool, default False): a learnable skip connection ``res`` (no bias).
        **kwargs: PyG's ``MessagePassing`` options that leave the result unchanged, and ``impl``
            (see :class:`~graphattn.nn.conv.GATConv`).

    Shapes:
        - input: x ``(N, F)`` or ``((N_s, F_s), (N_t, F_t))``, edge_index ``(2, E)`` or a
          torch.sparse ``adj_t`` ``(N_t, N_s)``, edge_attr ``(E, D)``
        - output: ``(N_t, H*C)`` (``(N_t, C)`` with ``concat=False``); with a truthy
          ``return_attention_weights`` also ``(edge_index, alpha)`` as in
          :class:`~graphattn.nn.conv.GATConv`.

    Example::

        >>> import torch
        >>> from graphattn.nn import GATv2Conv
        >>> x, edge_index = torch.randn(4, 16), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        >>> conv = GATv2Conv(16, 8, heads=2, share_weights=True)
        >>> conv(x, edge_index).shape
        torch.Size([4, 16])
    """

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, edge_dim: Optional[int] = None,
                 fill_value: Union[float, Tensor, str] = 'mean', bias: bool = True, share_weights: bool = False,
                 residual: bool = False, **kwargs):
        impl = conv_options(type(self).__name__, kwargs)
        super().__init__(in_channels, out_channels, heads=heads, concat=concat, dropout=dropout,
                         edge_dim=edge_dim, bias=bias, score="additive", root_weight=False,
                         negative_slope=negative_slope, impl=impl, add_self_loops=add_self_loops,
                         fill_value=fill_value, share_weights=share_weights, residual=residual, out_bias=bias,
                         weights_grad=True)

    def setup(self, f_src: int, f_dst: int, bias: bool) -> None:
        """PyG's GATv2Conv parameters, built in its order: ``lin_l``, ``lin_r`` (glorot),
        ``att`` ``(1, H, C)``, ``lin_edge``, ``res``, ``bias``."""
        H, C = self.heads, self.out_channels
        width = H * C if self.concat else C
        empty_modules(self)
        if isinstance(self.in_channels, int):
            f_dst = f_src
        self.lin_l = glorot_linear(f_src, H * C, bias)
        self.lin_r = self.lin_l if self.share_weights else glorot_linear(f_dst, H * C, bias)
        self.att = nn.Parameter(torch.empty(1, H, C))
        if self.edge_dim is not None:
            self.lin_edge = glorot_linear(self.edge_dim, H * C, False)
        if self.residual:
            self.res = glorot_linear(channel_pair(self.in_channels)[1], width, False)
        if self.out_bias:
            self.bias = nn.Parameter(torch.empty(width))

    def reset_parameters(self) -> None:
        for lin in (self.lin_l, self.lin_r, self.lin_edge, self.res):
            if lin is not None:
                lin.reset_parameters()
        glorot(self.att)
        zeros(self.bias)

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]], edge_index: Tensor,
                edge_attr: Optional[Tensor] = None, return_attention_weights: Optional[bool] = None):
        """``out``, or ``(out, (edge_index, alpha))`` when ``return_attention_weights`` is truthy
        (PyG's GATv2Conv convention; see the class docstring)."""
        want = bool(return_attention_weights)
        res = super().forward(x, edge_index, edge_attr, want)
        return (res[0], sparse_weights(*res[1])) if want else res
