r"""Key reduction (Linformer): attend to a fixed number r of key/value representatives per graph.

Wang et al. 2020 ("Linformer: Self-Attention with Linear Complexity") observe that the
``N × N`` attention matrix is close to low rank and project the N keys and values of a
sequence to ``r ≪ N`` rows before attending::

    K̃ = E K,  Ṽ = F V  (r × N projections),    out = softmax(Q K̃ᵀ / √C) Ṽ

Here per graph b of a batch (graphs never mix), over the graph's nodes in node order:

* ``mode="project"``: learned ``E, F ∈ R^{r × L_max}`` (shared by the heads), applied to the
  first ``n_b`` columns for a graph of ``n_b ≤ L_max`` nodes (Linformer's zero padding).
  For inputs of bounded size (sequences, images, molecules); ``max_nodes`` is required.
* ``mode="pool"``: position bucket ``⌊p·r / n_b⌋`` of the node at position ``p``; each
  representative is the mean key / value of its bucket (empty buckets are masked). No
  parameters and no size limit: for large graphs (one mini-batch of 100k nodes, r = 256).

Cost: ``O(N·r·H·C)`` time, ``O(B·L·r·H)`` memory for the scores (``O(N·r·H)`` without
padding), versus ``O(N²·H·C)`` for full attention. Exact (equal to full attention) when
every representative is one node: ``r = n_b`` with identity projections, or ``mode="pool"``
with ``r ≥ n_b``. Node order matters (it defines positions); the layer is therefore not
permutation-equivariant on graphs whose node order carries no meaning.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.ops.padding import GraphLayout, graph_layout
from graphattn.utils.validation import check_features

__all__ = ["REDUCTION_MODES", "ReducedKeyAttention"]

REDUCTION_MODES = ("project", "pool")


class ReducedKeyAttention(nn.Module):
    r"""Linformer-style global attention to ``num_keys`` representatives per graph (module docstring).

    Args:
        channels (int): feature size in and out (divisible by ``heads``).
        heads (int, default 1): H.
        num_keys (int, default 64): r, representatives per graph.
        mode (str, default "pool"): ``"project"`` (learned E, F) or ``"pool"`` (bucket means).
        max_nodes (int, optional): L_max, the largest graph ``"project"`` accepts (required there).
        dropout (float, default 0.0): dropout on the attention weights.
        bias (bool, default True): biases of the projections.

    Shapes: x ``(N, channels)``, batch ``(N,)`` (None = one graph) -> ``(N, channels)``.
    """

    def __init__(self, channels: int, heads: int = 1, num_keys: int = 64, mode: str = "pool",
                 max_nodes: Optional[int] = None, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if mode not in REDUCTION_MODES:
            raise ValueError(f"mode must be one of {REDUCTION_MODES}, got {mode!r}")
        if not isinstance(heads, int) or heads < 1 or channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        if not isinstance(num_keys, int) or num_keys < 1:
            raise ValueError(f"num_keys must be a positive int, got {num_keys!r}")
        if mode == "project" and (not isinstance(max_nodes, int) or max_nodes < 1):
            raise ValueError(f"mode='project' needs max_nodes=int >= 1 (largest graph), got {max_nodes!r}")
        if mode == "pool" and max_nodes is not None:
            raise ValueError("max_nodes is only used by mode='project'")
        self.channels, self.heads, self.num_keys, self.mode = channels, heads, num_keys, mode
        self.max_nodes, self.dropout = max_nodes, dropout
        self.lin_qkv = nn.Linear(channels, 3 * channels, bias=bias)
        self.lin_out = nn.Linear(channels, channels, bias=bias)
        if mode == "project":
            self.proj_key = nn.Parameter(torch.empty(num_keys, max_nodes))  # E (r, L_max)
            self.proj_value = nn.Parameter(torch.empty(num_keys, max_nodes))  # F (r, L_max)
        else:
            self.proj_key = self.proj_value = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_qkv.reset_parameters()
        self.lin_out.reset_parameters()
        if self.proj_key is not None:
            for p in (self.proj_key, self.proj_value):
                nn.init.normal_(p, std=1.0 / math.sqrt(self.max_nodes))

    def reduce(self, k: Tensor, v: Tensor, layout: GraphLayout):
        """``(N, H, C)`` keys and values -> ``(B, H, r, C)`` representatives and a ``(B, r)``
        mask of the non-empty ones."""
        B, r = layout.B, self.num_keys
        if self.mode == "project":
            if layout.L > self.max_nodes:
                raise ValueError(f"a graph has {layout.L} nodes but the layer was built with "
                                 f"max_nodes={self.max_nodes}")
            K, V = layout.pad(k), layout.pad(v)  # (B, L, H, C), zeros at empty slots
            E, Fm = self.proj_key[:, :layout.L], self.proj_value[:, :layout.L]  # (r, L)
            kr = torch.einsum("rl,blhc->bhrc", E, K)
            vr = torch.einsum("rl,blhc->bhrc", Fm, V)
            return kr, vr, torch.ones(B, r, dtype=torch.bool, device=k.device)
        n = layout.sizes[layout.graph]  # (N,) size of each node's graph
        bucket = layout.graph * r + torch.div(layout.pos * r, n, rounding_mode="floor")  # (N,)
        # (B*r,) members per bucket; index_add, not bincount (which reads its input's max on CUDA)
        count = torch.zeros(B * r, dtype=torch.long, device=k.device).index_add_(0, bucket, torch.ones_like(bucket))
        count = count.to(k.dtype)
        scale = (1.0 / count.clamp_min(1.0))[bucket][:, None, None]
        kr = k.new_zeros(B * r, *k.shape[1:]).index_add_(0, bucket, k * scale)  # (B*r, H, C) bucket means
        vr = v.new_zeros(B * r, *v.shape[1:]).index_add_(0, bucket, v * scale)
        to_b = lambda t: t.view(B, r, *t.shape[1:]).transpose(1, 2)  # noqa: E731 (B, H, r, C)
        ok = (count > 0).view(B, r) | (layout.sizes == 0)[:, None]  # empty graphs: no NaN rows
        return to_b(kr), to_b(vr), ok

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, num_graphs: Optional[int] = None) -> Tensor:
        check_features(x, self.channels, "x")
        N, H = x.size(0), self.heads
        q, k, v = self.lin_qkv(x).view(N, 3, H, self.channels // H).unbind(1)  # 3 x (N, H, C)
        layout = graph_layout(batch, N, num_graphs, device=x.device)
        kr, vr, ok = self.reduce(k, v, layout)  # (B, H, r, C), (B, r)
        Q = layout.pad(q).transpose(1, 2)  # (B, H, L, C)
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(Q, kr, vr, attn_mask=ok[:, None, None, :], dropout_p=p)
        out = layout.unpad(out.transpose(1, 2))  # (N, H, C)
        return self.lin_out(out.reshape(N, self.channels))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"num_keys={self.num_keys}, mode={self.mode!r})")
