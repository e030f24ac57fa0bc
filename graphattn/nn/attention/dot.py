"""The scaled dot-product score (Vaswani et al. 2017; ``TransformerConv``, Shi et al. 2021)."""
from __future__ import annotations

import math

from torch import Tensor

from graphattn.nn.attention.score import SCORES, EdgeScore

__all__ = ["DotScore"]


@SCORES.register("dot")
class DotScore(EdgeScore):
    r"""``s_ij = (W_q x_i) · (W_k x_j + W_e e_ij) / √C``, values ``W_v x_j + W_e e_ij``.

    Parameters: one fused ``lin_qkv`` ``(3*H*C, F)`` for a positive int ``in_channels``, else
    ``lin_query`` (targets) / ``lin_key`` / ``lin_value`` (sources), as ``TransformerConv``;
    ``lin_edge`` (no bias) with ``edge_dim``. Runs on every backend: SDPA for complete graphs,
    the fused C++ / Triton kernels, the chunked path.
    """

    kernel = "dot"
    edge_values = True
    fused_parts = 3

    def roles(self, layer):
        return ("lin_query",), ("lin_key", "lin_value")

    def edge_scores(self, layer, q: Tensor, key: Tensor, dst: Tensor) -> Tensor:
        return (q.index_select(0, dst) * key).sum(-1) / math.sqrt(q.size(-1))  # (E, H)
