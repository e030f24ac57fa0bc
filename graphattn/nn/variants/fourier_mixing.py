r"""Fourier mixing (FNet, Lee-Thorp et al. 2022, "FNet: Mixing Tokens with Fourier Transforms"): no
attention at all, the real part of a 2-D discrete Fourier transform over (node order, channels)::

    out = Re(FFT_nodes(FFT_channels(x)))

per graph b of a batch, over its own ``n_b`` nodes (graphs never mix, and a graph's transform does
not depend on the other graphs' sizes). No parameters; ``O(n log n · C + n · C log C)`` per graph. The
transform fixes a meaning to node order, so it is for fixed-order inputs (sequences, images), not for
graphs whose node order is arbitrary.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from graphattn.ops.padding import graph_layout
from graphattn.utils.validation import check_features

__all__ = ["FourierMixing"]


class FourierMixing(nn.Module):
    r"""FNet's parameter-free token mixing (module docstring).

    Args:
        channels (int): feature size in and out.
        heads (int, default 1): accepted for the global branches' common signature; FNet has no heads.
        dropout (float, default 0.0): likewise accepted; there are no attention weights to drop.

    Shapes: x ``(N, channels)``, batch ``(N,)`` (None = one graph) -> ``(N, channels)``.
    """

    def __init__(self, channels: int, heads: int = 1, dropout: float = 0.0):
        super().__init__()
        self.channels = channels

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, num_graphs: Optional[int] = None) -> Tensor:
        check_features(x, self.channels, "x")
        if x.numel() == 0:  # no nodes: MKL's FFT refuses a length-0 transform
            return x.clone()
        mixed = torch.fft.fft(x.float() if x.dtype in (torch.float16, torch.bfloat16) else x, dim=-1)
        if batch is None:
            return torch.fft.fft(mixed, dim=0).real.to(x.dtype)
        layout = graph_layout(batch, x.size(0), num_graphs, device=x.device)
        out = torch.empty_like(mixed.real)
        padded = layout.pad(mixed)  # (B, L, C): one FFT per group of graphs of the same size
        for n in torch.unique(layout.sizes).tolist():
            if n == 0:
                continue
            graphs = (layout.sizes == n).nonzero().flatten()
            part = torch.fft.fft(padded[graphs, :n], dim=1).real  # (G, n, C)
            rows = (layout.sizes == n)[layout.graph]  # the nodes of these graphs
            out[rows] = part[torch.searchsorted(graphs, layout.graph[rows]), layout.pos[rows]]
        return out.to(x.dtype)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels})"
