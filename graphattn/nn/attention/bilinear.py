"""A bilinear score: a learned ``(C, C)`` form per head between queries and keys."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from graphattn.nn.attention.dot import DotScore
from graphattn.nn.attention.projections import Parts
from graphattn.nn.attention.score import SCORES

__all__ = ["BilinearScore"]


@SCORES.register("bilinear")
class BilinearScore(DotScore):
    r"""``s_ij = (W_q x_i)ᵀ B_h (W_k x_j + W_e e_ij) / √C`` with one learned ``B_h`` ``(C, C)`` per
    head (parameter ``bilinear`` ``(H, C, C)``, initialised to the identity: the layer starts as
    ``score="dot"``); values as ``dot``.

    The form runs on the dot-product kernels: the queries are mapped to ``B_hᵀ q`` once per node
    ``(N, H, C)``, so every backend (SDPA, fused, chunked) and the explainer path take it unchanged.
    ``B_h`` and ``W_q`` multiply, so the set of functions is that of ``dot``; the separate form
    changes the parametrisation (e.g. to regularise or share ``B_h``), and is the worked example of
    adding a score (docs/layer.md, "Adding a score").
    """

    def setup(self, layer, f_src: int, f_dst: int, bias: bool) -> None:
        super().setup(layer, f_src, f_dst, bias)
        layer.bilinear = nn.Parameter(torch.empty(layer.heads, layer.out_channels, layer.out_channels))

    def reset_score_parameters(self, layer) -> None:
        with torch.no_grad():
            layer.bilinear.copy_(torch.eye(layer.out_channels).expand_as(layer.bilinear))

    def project(self, layer, x_src: Tensor, x_dst) -> Parts:
        parts = super().project(layer, x_src, x_dst)
        q = torch.einsum("nhc,hcd->nhd", parts.dst, layer.bilinear)  # (N, H, C): B_hᵀ q per node
        return parts._replace(dst=q.contiguous())
