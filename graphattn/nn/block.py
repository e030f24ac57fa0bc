"""GraphTransformerBlock: edge attention + feed-forward, pre-norm residuals."""
from __future__ import annotations

from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor, nn
from torch_geometric.nn import GINConv, GINEConv

from graphattn.nn.attention import GraphSelfAttention
from graphattn.nn.attention.explain import layer_edge_mask
from graphattn.nn.dropout import Dropout
from graphattn.nn.variants import make_global_attention
from graphattn.ops.csr import plain_tensor

__all__ = ["GraphTransformerBlock", "NORMS", "LOCAL_MPNNS"]

NORMS = ("layer", "batch", "none")
LOCAL_MPNNS = ("gine", "gin")


def make_norm(norm: str, channels: int) -> nn.Module:
    if norm == "layer":
        return nn.LayerNorm(channels)
    if norm == "batch":
        return nn.BatchNorm1d(channels)
    if norm == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


class GraphTransformerBlock(nn.Module):
    r"""One graph transformer layer (Vaswani et al. 2017, pre-norm as in Xiong et al. 2020;
    graph version as in Dwivedi & Bresson 2020)::

        h = x + Dropout(Attn(Norm1(x), edge_index, edge_attr)) [+ Dropout(Global(Norm1(x), batch))]
              [+ Dropout(Local(Norm1(x), edge_index, edge_attr))]
        out = h + Dropout(FFN(Norm2(h))),   FFN = Linear(C, r*C) -> GELU -> Dropout -> Linear(r*C, C)

    Args:
        channels (int): C, feature size in and out (must be divisible by ``heads``).
        heads (int, default 4): attention heads (each of ``channels // heads`` channels).
        dropout (float, default 0.0): dropout on the residual branches and inside the FFN.
        attn_dropout (float, default 0.0): dropout on attention weights.
        edge_dim (int, optional): edge feature size D (enters keys and values).
        norm (str, default "layer"): ``"layer"``, ``"batch"`` or ``"none"``.
        ffn_ratio (int, default 2): hidden size multiplier r of the feed-forward network.
        score (str, default "dot"): attention score, see :class:`GraphSelfAttention`.
        normalization (str, default "softmax"): edge score normalization, see
            :class:`GraphSelfAttention`.
        global_attn (str or nn.Module, optional): a global branch added next to the edge
            attention (GraphGPS recipe): ``"linear"``, ``"reduced"``, ``"clustered"`` or
            ``"synthesizer"`` (see :func:`graphattn.nn.variants.make_global_attention`), or a
            module with ``forward(x, batch) -> (N, C)``.
        global_attn_kwargs (dict, optional): options of that module (e.g. ``feature_map="favor"``).
        local_mpnn (str, optional): a message-passing branch added next to the attention, as in
            GraphGPS (Rampášek et al. 2022): ``"gine"`` (PyG ``GINEConv``, edge features enter
            the messages; needs ``edge_dim``) or ``"gin"`` (``GINConv``), each with a 2-layer
            MLP of width C. Sum aggregation counts neighbours, which softmax attention cannot.
        impl (str, default "auto"): edge attention backend of the layer, see
            :class:`GraphSelfAttention` (e.g. ``"fused"`` for gradient penalties on complete
            graphs, whose ``"auto"`` SDPA path has no double backward on the CPU).

    Shapes:
        x ``(N, C)``, edge_index ``(2, E)``, edge_attr ``(E, D)``, batch ``(N,)`` -> ``(N, C)``.
    """

    def __init__(self, channels: int, heads: int = 4, dropout: float = 0.0, attn_dropout: float = 0.0,
                 edge_dim: Optional[int] = None, norm: str = "layer", ffn_ratio: int = 2,
                 score: str = "dot", normalization: str = "softmax",
                 global_attn: Union[None, str, nn.Module] = None,
                 global_attn_kwargs: Optional[Dict[str, Any]] = None, local_mpnn: Optional[str] = None,
                 impl: str = "auto"):
        super().__init__()
        if channels % heads != 0:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        if local_mpnn is not None and local_mpnn not in LOCAL_MPNNS:
            raise ValueError(f"local_mpnn must be None or one of {LOCAL_MPNNS}, got {local_mpnn!r}")
        if local_mpnn == "gine" and edge_dim is None:
            raise ValueError("local_mpnn='gine' needs edge features (edge_dim); use 'gin' without them")
        self.channels, self.heads, self.dropout, self.norm = channels, heads, dropout, norm
        self.norm1, self.norm2 = make_norm(norm, channels), make_norm(norm, channels)
        self.attn = GraphSelfAttention(channels, channels // heads, heads=heads, dropout=attn_dropout,
                                       edge_dim=edge_dim, score=score, root_weight=False,
                                       normalization=normalization, impl=impl)
        if isinstance(global_attn, str):
            global_attn = make_global_attention(global_attn, channels, heads, dropout=attn_dropout,
                                                **(global_attn_kwargs or {}))
        elif global_attn_kwargs:
            raise ValueError("global_attn_kwargs needs global_attn given as a string")
        self.global_attn = global_attn
        self.local_mpnn, self.local = local_mpnn, None
        if local_mpnn is not None:
            mlp = nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, channels))
            self.local = (GINEConv(mlp, train_eps=True, edge_dim=None if edge_dim == channels else edge_dim)
                          if local_mpnn == "gine" else GINConv(mlp, train_eps=True))
        self.ffn = nn.Sequential(nn.Linear(channels, ffn_ratio * channels), nn.GELU(),
                                 Dropout(dropout), nn.Linear(ffn_ratio * channels, channels))
        self.drop = Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in (self.norm1, self.norm2, self.attn, self.global_attn, self.local, self.ffn[0], self.ffn[3]):
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, return_attention_weights: bool = False, *,
                edge_attr_index: Optional[Tensor] = None, local_edges: Optional[int] = None):
        """``edge_attr_index`` ``(E,)``: ``edge_attr`` is a ``(U, D)`` table of distinct rows,
        see :class:`GraphSelfAttention`. ``local_edges``: the local MPNN uses only the first
        ``local_edges`` edges (the graph's own, not the global-token edges; default all)."""
        xn = self.norm1(x)
        extra = {} if edge_attr_index is None else {"edge_attr_index": edge_attr_index}
        res = self.attn(xn, edge_index, edge_attr, return_attention_weights, batch=batch, **extra)
        att, weights = res if return_attention_weights else (res, None)
        h = x + self.drop(att)
        if self.global_attn is not None:
            h = h + self.drop(self.global_attn(xn, batch))
        if self.local is not None:
            h = h + self.drop(self._local(xn, edge_index, edge_attr, edge_attr_index, local_edges))
        out = h + self.drop(self.ffn(self.norm2(h)))
        return (out, weights) if return_attention_weights else out

    def _local(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor],
               edge_attr_index: Optional[Tensor], local_edges: Optional[int]) -> Tensor:
        E = edge_index.size(1) if local_edges is None else int(local_edges)
        edge_index = edge_index[:, :E]
        if edge_index.dtype != torch.long:  # PyG's scatter in GINConv/GINEConv needs int64 ids
            edge_index = plain_tensor(edge_index).long()
        conv = self.local
        mask = getattr(conv, "_edge_mask", None) if getattr(conv, "explain", False) else None
        if mask is not None and (mask.numel() != E or self.attn.explain_loops_replaced):
            # a PyG Explainer's mask set for the input edges, while this branch sees them with the
            # loops NodeClassifier(self_loops=True) replaced (reordered even when the count is the
            # same): PyG's own loop rule expects one loop per target and counts the global tokens
            # (AssertionError), or applies the mask by position; map it as the attention does
            mapped = layer_edge_mask(mask, getattr(conv, "_loop_mask", None), conv._apply_sigmoid, edge_index,
                                     x.size(0), self.attn.explain_loops_replaced)
            # set_masks registered the mask as a Parameter: swap the entry itself for this call
            store = conv._parameters if "_edge_mask" in conv._parameters else conv.__dict__
            saved = store["_edge_mask"], conv._apply_sigmoid
            store["_edge_mask"], conv._apply_sigmoid = mapped, False
            try:
                return self._local_call(x, edge_index, edge_attr, edge_attr_index, E)
            finally:
                store["_edge_mask"], conv._apply_sigmoid = saved
        return self._local_call(x, edge_index, edge_attr, edge_attr_index, E)

    def _local_call(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor],
                    edge_attr_index: Optional[Tensor], E: int) -> Tensor:
        if self.local_mpnn == "gin":
            return self.local(x, edge_index)
        if edge_attr_index is not None:  # table form: PyG's GINEConv takes one row per edge
            edge_attr = edge_attr.index_select(0, edge_attr_index[:E])
        else:
            edge_attr = edge_attr[:E]
        return self.local(x, edge_index, edge_attr)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, heads={self.heads}, norm={self.norm!r})"
