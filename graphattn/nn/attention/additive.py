"""The additive score of GATv2 (Brody et al. 2022)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.functional import EDGE_IMPLS
from graphattn.nn.attention import weights
from graphattn.nn.attention.score import SCORES, EdgeScore
from graphattn.ops.csr import EdgeCSR

__all__ = ["AdditiveScore"]


@SCORES.register("additive")
class AdditiveScore(EdgeScore):
    r"""``s_ij = aᵀ LeakyReLU(W_r x_i + W_l x_j + W_e e_ij)``, values ``W_l x_j``.

    Parameters: ``lin_qkv`` (two parts, one with ``share_weights``) for a positive int
    ``in_channels``, else ``lin_r`` (targets) / ``lin_l`` (sources; ``lin_r is lin_l`` with
    ``share_weights``), and ``att`` ``(H, C)`` (xavier), as ``GATv2Conv``; ``lin_edge`` with
    ``edge_dim`` enters the score only. No fused kernel: the chunked path, or PyG's own per-edge
    ops on small graphs when the weights carry a gradient.
    """

    kernel = "additive"
    impls = tuple(i for i in EDGE_IMPLS if i != "fused")
    shares_weights = True
    fused_parts = 2

    def check(self, impl: str, normalization: str, share_weights: bool) -> None:
        if impl == "fused":  # found here rather than at the first forward
            raise ValueError("impl='fused' supports only score='dot' or 'gat', got score='additive': use "
                             "impl='auto' or 'chunked' (attention dropout is inactive in eval; in training it "
                             "needs those too)")
        super().check(impl, normalization, share_weights)

    def roles(self, layer):
        return ("lin_r",), ("lin_l",)

    def setup(self, layer, f_src: int, f_dst: int, bias: bool) -> None:
        super().setup(layer, f_src, f_dst, bias)
        if layer.share_weights and layer.lin_qkv is None:
            layer.lin_r = layer.lin_l
        H, C = layer.heads, layer.out_channels
        layer.att = nn.Parameter(torch.empty(H, C))

    def reset_score_parameters(self, layer) -> None:
        nn.init.xavier_uniform_(layer.att)

    def kernel_options(self, layer) -> dict:
        return dict(score="additive", att=layer.att.view(layer.heads, layer.out_channels),
                    negative_slope=layer.negative_slope)

    def edge_scores(self, layer, q: Tensor, key: Tensor, dst: Tensor) -> Tensor:
        att = layer.att.view(q.shape[1:])
        return (F.leaky_relu(q.index_select(0, dst) + key, layer.negative_slope) * att).sum(-1)  # (E, H)

    def explicit_small_graphs(self, layer, csr: EdgeCSR, v: Tensor) -> bool:
        # there is no fused additive kernel, and on small graphs PyG's own per-edge ops beat the
        # chunked one (Cora, 8 heads x 8: about 0.7x its CPU time with the recomputing backward)
        H, C = v.shape[1:]
        return csr.num_edges * H * C <= weights.EXPLICIT_ELEMENTS
