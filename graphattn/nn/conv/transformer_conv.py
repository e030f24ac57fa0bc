"""TransformerConv: PyG's graph transformer conv (Shi et al. 2021), computed by our kernels."""
from __future__ import annotations

from typing import Optional, Tuple, Union

from torch import Tensor
from torch_geometric.nn import Linear

from graphattn.nn.attention import GraphSelfAttention
from graphattn.nn.attention.projections import channel_pair, empty_modules
from graphattn.nn.conv.pyg_api import conv_options

__all__ = ["TransformerConv"]


class TransformerConv(GraphSelfAttention):
    r"""The graph transformer operator of "Masked Label Prediction: Unified Message Passing Model
    for Semi-Supervised Classification" (Shi et al. 2021), with the constructor, ``forward``,
    return values, parameters and ``repr`` of PyG 2.8's ``torch_geometric.nn.TransformerConv``:
    ``from graphattn.nn import TransformerConv`` is the only change.

    .. math::
        \alpha_{ij} = \operatorname{softmax}_j\Big(\frac{(W_3 x_i)^\top (W_4 x_j [+ W_6 e_{ij}])}{\sqrt{C}}\Big),
        \qquad x'_i = W_1 x_i + \textstyle\sum_{j \in \mathcal{N}(i)} \alpha_{ij} (W_2 x_j [+ W_6 e_{ij}])

    and with ``beta=True`` the root term is gated:
    :math:`x'_i = \beta_i W_1 x_i + (1 - \beta_i) m_i`,
    :math:`\beta_i = \sigma(w_5^\top [W_1 x_i, m_i, W_1 x_i - m_i])` (``m_i`` the aggregated messages).
    It is :class:`~graphattn.nn.attention.GraphSelfAttention` with ``score="dot"``: the fused
    kernels (C++ on CPU, Triton on CUDA, chunked PyTorch elsewhere) never form an ``(E, H, C)``
    tensor.

    Args:
        in_channels (int or tuple): input size, ``-1`` (lazy) or ``(F_src, F_dst)`` (bipartite).
        out_channels (int): channels per head C.
        heads (int, default 1): number of heads H.
        concat (bool, default True): concatenate the heads (else average them).
        beta (bool, default False): the gated root term above (needs ``root_weight``).
        dropout (float, default 0.0): dropout on the attention weights in training (``F.dropout``
            on ``alpha`` in edge order, as PyG; the returned ``alpha`` is the one before dropout).
        edge_dim (int, optional): edge feature size D, added to keys and values.
        bias (bool, default True): biases of the query/key/value/skip projections.
        root_weight (bool, default True): add the root term ``lin_skip(x_i)`` (``lin_skip`` is
            built either way, as in PyG).
        **kwargs: PyG's ``MessagePassing`` options that leave the result unchanged, and ``impl``
            (see :class:`~graphattn.nn.conv.GATConv`).

    Shapes:
        - input: x ``(N, F)`` or ``((N_s, F_s), (N_t, F_t))``, edge_index ``(2, E)`` or a
          torch.sparse ``adj_t`` ``(N_t, N_s)``, edge_attr ``(E, D)``
        - output: ``(N_t, H*C)`` (``(N_t, C)`` with ``concat=False``); when
          ``return_attention_weights`` is a bool (True or False, as in PyG) also
          ``(edge_index, alpha)``: the given edge_index or ``adj_t`` and alpha ``(E, H)`` with a gradient.

    Example::

        >>> import torch
        >>> from graphattn.nn import TransformerConv
        >>> x, edge_index = torch.randn(4, 16), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        >>> conv = TransformerConv(16, 8, heads=2, edge_dim=3, beta=True)
        >>> conv(x, edge_index, torch.randn(4, 3)).shape
        torch.Size([4, 16])
    """

    #: PyG's TransformerConv returns alpha before dropout
    returns_dropped_weights = False

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int, heads: int = 1,
                 concat: bool = True, beta: bool = False, dropout: float = 0., edge_dim: Optional[int] = None,
                 bias: bool = True, root_weight: bool = True, **kwargs):
        impl = conv_options(type(self).__name__, kwargs)
        super().__init__(in_channels, out_channels, heads=heads, concat=concat, dropout=dropout,
                         edge_dim=edge_dim, bias=bias, score="dot", root_weight=root_weight, impl=impl,
                         beta=beta and root_weight, weights_grad=True)

    def setup(self, f_src: int, f_dst: int, bias: bool) -> None:
        """PyG's TransformerConv parameters, built in its order: ``lin_key``, ``lin_query``,
        ``lin_value``, ``lin_edge``, ``lin_skip`` (also with ``root_weight=False``), ``lin_beta``."""
        HC = self.heads * self.out_channels
        width = HC if self.concat else self.out_channels
        f_src, f_dst = channel_pair(self.in_channels)
        empty_modules(self)
        self.lin_key = Linear(f_src, HC, bias=bias)
        self.lin_query = Linear(f_dst, HC, bias=bias)
        self.lin_value = Linear(f_src, HC, bias=bias)
        if self.edge_dim is not None:
            self.lin_edge = Linear(self.edge_dim, HC, bias=False)
        self.lin_skip = Linear(f_dst, width, bias=bias)
        if self.beta:
            self.lin_beta = Linear(3 * width, 1, bias=False)

    def reset_parameters(self) -> None:
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_edge, self.lin_skip, self.lin_beta):
            if lin is not None:
                lin.reset_parameters()

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]], edge_index: Tensor,
                edge_attr: Optional[Tensor] = None, return_attention_weights: Optional[bool] = None):
        """``out``, or ``(out, (edge_index, alpha))`` when ``return_attention_weights`` is a bool
        (PyG's TransformerConv convention, False included; see the class docstring)."""
        return super().forward(x, edge_index, edge_attr, isinstance(return_attention_weights, bool))
