r"""Memory-compressed attention (Liu et al. 2018, "Generating Wikipedia by Summarizing Long Sequences"):
keys and values pass through a strided 1-D convolution over node order before attention.

Per graph b of a batch (graphs never mix), with the graph's ``n_b`` nodes in node order::

    K̃ = conv_k(K),  Ṽ = conv_v(V)   (kernel = stride = s: ⌈n_b / s⌉ summaries)
    out = softmax(Q K̃ᵀ / √C) Ṽ

Each query attends to ``⌈n_b / s⌉`` summaries of ``s`` consecutive keys (the last block of a graph
whose size is not a multiple of ``s`` is zero-padded, as the paper's convolution pads the sequence).
Cost ``O(n²/s · H·C)`` per graph instead of ``O(n²·H·C)``; with ``s = 1`` and an identity kernel it is
full attention. Node order matters (it defines the blocks): for sequences, images and other inputs
whose order means something.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.ops.padding import graph_layout
from graphattn.utils.validation import check_features

__all__ = ["CompressedKeyAttention"]


class CompressedKeyAttention(nn.Module):
    r"""Attention to strided-convolution summaries of the keys and values (module docstring).

    Args:
        channels (int): feature size in and out (divisible by ``heads``).
        heads (int, default 1): H.
        stride (int, default 4): s, the convolution's kernel size and stride (keys per summary).
        dropout (float, default 0.0): dropout on the attention weights.
        bias (bool, default True): biases of the projections and the convolutions.

    Shapes: x ``(N, channels)``, batch ``(N,)`` (None = one graph) -> ``(N, channels)``.
    """

    def __init__(self, channels: int, heads: int = 1, stride: int = 4, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if not isinstance(heads, int) or heads < 1 or channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise ValueError(f"stride must be a positive int, got {stride!r}")
        self.channels, self.heads, self.stride, self.dropout = channels, heads, stride, dropout
        self.lin_qkv = nn.Linear(channels, 3 * channels, bias=bias)
        self.lin_out = nn.Linear(channels, channels, bias=bias)
        self.conv_key = nn.Conv1d(channels, channels, stride, stride=stride, bias=bias)
        self.conv_value = nn.Conv1d(channels, channels, stride, stride=stride, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in (self.lin_qkv, self.lin_out, self.conv_key, self.conv_value):
            m.reset_parameters()

    def compress(self, k: Tensor, v: Tensor, layout):
        """``(N, channels)`` keys and values -> ``(B, M, channels)`` summaries (``M = ⌈L / s⌉``) and the
        ``(B, M)`` mask of those that cover at least one node of their graph."""
        s, L = self.stride, layout.L
        M = max(math.ceil(L / s), 1)
        grid = lambda t: F.pad(layout.pad(t), (0, 0, 0, M * s - L)).transpose(1, 2)  # noqa: E731 (B, C, M*s)
        kc = self.conv_key(grid(k)).transpose(1, 2)  # (B, M, C)
        vc = self.conv_value(grid(v)).transpose(1, 2)
        first = torch.arange(M, device=k.device) * s  # the first slot each summary covers
        ok = (first[None, :] < layout.sizes[:, None]) | (layout.sizes == 0)[:, None]  # empty graphs: no NaN rows
        return kc, vc, ok

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, num_graphs: Optional[int] = None) -> Tensor:
        check_features(x, self.channels, "x")
        N, H, C = x.size(0), self.heads, self.channels
        q, k, v = self.lin_qkv(x).view(N, 3, C).unbind(1)  # 3 x (N, C)
        layout = graph_layout(batch, N, num_graphs, device=x.device)
        kc, vc, ok = self.compress(k, v, layout)
        heads = lambda t: t.view(t.size(0), t.size(1), H, C // H).transpose(1, 2)  # noqa: E731 (B, H, *, C/H)
        Q = heads(layout.pad(q))
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(Q, heads(kc), heads(vc), attn_mask=ok[:, None, None, :], dropout_p=p)
        out = layout.unpad(out.transpose(1, 2))  # (N, H, C/H)
        return self.lin_out(out.reshape(N, C))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, heads={self.heads}, stride={self.stride})"
