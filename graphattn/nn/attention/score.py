"""``EdgeScore``: the base of the attention scores of :class:`~graphattn.nn.attention.GraphSelfAttention`,
and the registry of their names.

A score is one small class that owns what differs between attention forms: the projections it
builds on the layer (:meth:`EdgeScore.setup`) and their initialisation, the edge-feature term, and
the score / value computation (:meth:`EdgeScore.attend`, :meth:`EdgeScore.edge_scores`). The layer
keeps the rest (input checks, self-loops, the CSR view, the root term, the PyG return contract);
the kernels in :mod:`graphattn.ops` keep their own dispatch on :attr:`EdgeScore.kernel`.

A new score is one file: a subclass registered by name,

>>> import torch
>>> from graphattn.nn.attention import DotScore, GraphSelfAttention, SCORES
>>> @SCORES.register("scaled_dot")
... class ScaledDotScore(DotScore):
...     '''Dot-product scores with the queries doubled (an example).'''
...     def project(self, layer, x_src, x_dst):
...         parts = super().project(layer, x_src, x_dst)
...         return parts._replace(dst=2 * parts.dst)
>>> layer = GraphSelfAttention(8, 4, heads=2, score="scaled_dot")
>>> layer(torch.randn(3, 8), torch.tensor([[0, 1, 2], [1, 2, 0]])).shape
torch.Size([3, 8])
>>> del SCORES["scaled_dot"]
"""
from __future__ import annotations

import math
from functools import partial
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.functional import EDGE_IMPLS, edge_attention_prechecked
from graphattn.nn.attention.explain import masked_edge_attention
from graphattn.nn.attention.projections import Parts, convert_state_dict, make_linear, project_parts
from graphattn.nn.attention.weights import aggregate, edge_softmax, weights_with_grad
from graphattn.ops.csr import EdgeCSR, plain_tensor
from graphattn.ops.normalization import NORMALIZATIONS, normalized_edge_attention
from graphattn.utils.registry import Registry
from graphattn.utils.validation import check_dtype, check_row_index, check_tensor_shape

__all__ = ["EdgeScore", "SCORES", "stacked"]


def stacked(t: Tensor, before: int, after: int) -> Tensor:
    """``t`` ``(n, H, C)`` with ``before`` zero rows above and ``after`` below (a bipartite graph
    runs as one node set ``[targets; sources]``)."""
    H, C = t.shape[1:]
    return torch.cat([t.new_zeros(before, H, C), t, t.new_zeros(after, H, C)])


class EdgeScore:
    """One attention form of :class:`~graphattn.nn.attention.GraphSelfAttention`.

    Subclasses set the class attributes and override :meth:`setup` (the projections), and, where
    the form differs from a query-key kernel call, :meth:`edge_scores`, :meth:`attend` and
    :meth:`explain`. A score object holds no tensors: the parameters live on the layer, under
    the names PyG's convs give them, so state dicts stay PyG's.
    """

    #: the registered name (``GraphSelfAttention(score=name)``)
    name: str = ""
    #: the score the kernels of :mod:`graphattn.ops` compute (``"dot"`` / ``"additive"``), or None
    #: when the scores reach the kernels as an ``(E, H)`` bias
    kernel: Optional[str] = None
    #: the ``impl`` values it runs on
    impls: Tuple[str, ...] = EDGE_IMPLS
    #: the normalizations it can be combined with
    normalizations: Tuple[str, ...] = NORMALIZATIONS
    #: takes ``share_weights=True`` (one projection for both sides)
    shares_weights: bool = False
    #: takes ``x=(x_src, None)`` (no target features)
    needs_targets: bool = True
    #: the edge features are added to the values too (not only to the keys)
    edge_values: bool = False
    #: how many ``H*C`` rows a fused ``lin_qkv`` projection holds (0: no fused layout)
    fused_parts: int = 0
    #: returns attention weights with a gradient when the layer has ``weights_grad=True``
    weights_grad: bool = True

    def check(self, impl: str, normalization: str, share_weights: bool) -> None:
        """``ValueError`` for an option this score cannot take, naming the valid ones."""
        if impl not in self.impls:
            raise ValueError(f"impl={impl!r} cannot take score={self.name!r}: use one of {self.impls}")
        if normalization not in self.normalizations:
            raise ValueError(f"normalization={normalization!r} needs a score that takes it (score={self.name!r} "
                             f"takes {self.normalizations}; e.g. score='dot' or 'additive') and weights_grad=False "
                             "(both are softmax attention)")
        if share_weights and not self.shares_weights:
            raise ValueError(f"share_weights=True applies to score='additive' (GATv2), got score={self.name!r}")

    # --- parameters -------------------------------------------------------------------------------
    def roles(self, layer) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
        """Names of the target-side and source-side projections of the per-role layout."""
        raise NotImplementedError

    def setup(self, layer, f_src: int, f_dst: int, bias: bool) -> None:
        """Build this score's projections (and ``lin_edge``) on ``layer``; the layer adds the root
        term after them. Build order = the random draws of a seeded run."""
        H, C = layer.heads, layer.out_channels
        if self.fused_parts and isinstance(layer.in_channels, int) and layer.in_channels > 0:
            n = 1 if layer.share_weights else self.fused_parts
            layer.lin_qkv = nn.Linear(f_src, n * H * C, bias=bias)  # one (n*H*C, F) weight
        else:  # one projection per role, on its side, with PyG's names (lazy -1 widths too), built in
            # one fixed order: parameters() and so an optimizer's saved state keep their order
            dst, src = self.roles(layer)
            for name in ("lin_query", "lin_key", "lin_value", "lin_l", "lin_r"):
                if name in dst + src:
                    setattr(layer, name, make_linear(f_dst if name in dst else f_src, H * C, bias))
        if layer.edge_dim is not None:
            layer.lin_edge = nn.Linear(layer.edge_dim, H * C, bias=False)

    def reset_parameters(self, layer) -> None:
        """Initial values of the whole layer, in this score's order: the projections,
        ``lin_edge`` and ``lin_skip`` (``nn.Linear``'s initialisation), then ``res``, ``lin_beta``."""
        for lin in (layer.lin_qkv, layer.lin_query, layer.lin_key, layer.lin_value, layer.lin_l, layer.lin_r,
                    layer.lin_edge, layer.lin_skip):
            if lin is not None:
                lin.reset_parameters()  # PyG's Linear skips a lazy (not yet shaped) weight
        self.reset_score_parameters(layer)
        for lin in (layer.res, layer.lin_beta):
            if lin is not None:
                lin.reset_parameters()

    def reset_score_parameters(self, layer) -> None:
        """Initial values of the score's own parameters (``att``, ...), after the projections."""

    def convert_state_dict(self, layer, state_dict: dict, prefix: str) -> None:
        """Make a state dict of the other projection layout load (in place)."""
        convert_state_dict(layer, state_dict, prefix, self.roles(layer))

    # --- forward ----------------------------------------------------------------------------------
    def project(self, layer, x_src: Tensor, x_dst: Optional[Tensor]) -> Parts:
        """The projected target part, source parts (each ``(N, H, C)``) and the root term."""
        return project_parts(layer, x_src, x_dst, self.roles(layer))

    def edge_features(self, layer, edge_attr: Tensor) -> Tensor:
        """The projected edge features of the ``(rows, D)`` table: ``(rows, H, C)``, added to keys
        (and values with :attr:`edge_values`)."""
        return layer.lin_edge(edge_attr).view(-1, layer.heads, layer.out_channels)  # (rows, H, C)

    def edge_features_per_edge(self, layer, edge_attr: Optional[Tensor], edge_attr_index: Optional[Tensor], E: int,
                               wdtype: Optional[torch.dtype]) -> Optional[Tensor]:
        """The projected edge features per edge (``(E, H, C)``, or ``(E, H)`` for a score
        term); None without ``edge_dim``; with ``edge_attr_index`` the projection runs on the
        ``(U, D)`` table."""
        if layer.lin_edge is None:
            if edge_attr is not None:
                raise ValueError("edge_attr was given but the layer has no edge_dim; "
                                 "build it with edge_dim=D to use edge features")
            if edge_attr_index is not None:
                raise ValueError("edge_attr_index was given but the layer has no edge_dim")
            return None
        if edge_attr is None:
            raise ValueError(f"edge_attr is required: the layer was built with edge_dim={layer.edge_dim}")
        if wdtype is not None:
            check_dtype(edge_attr, wdtype, "edge_attr")
        if edge_attr.dim() == 1 and layer.edge_dim == 1:
            edge_attr = edge_attr[:, None]
        rows = E if edge_attr_index is None else edge_attr.size(0)
        check_tensor_shape(edge_attr, (rows, layer.edge_dim), "edge_attr")
        feat = self.edge_features(layer, edge_attr)  # (rows, H, C) | (rows, H)
        if edge_attr_index is None:
            return feat
        check_row_index(edge_attr_index, E, edge_attr.size(0), "edge_attr_index")
        return feat.index_select(0, edge_attr_index)

    def key_value(self, parts: Parts) -> Tuple[Tensor, Tensor]:
        """The keys and values ``(N_src, H, C)`` among the source parts."""
        return parts.src[0], parts.src[-1]

    def kernel_options(self, layer) -> dict:
        """Keyword arguments of :func:`graphattn.functional.edge_attention` for this score."""
        return {}

    def edge_scores(self, layer, q: Tensor, key: Tensor, dst: Tensor) -> Tensor:
        """The scores ``(E, H)`` of each edge from the queries ``q`` ``(N, H, C)`` and the edges'
        keys ``key`` ``(E, H, C)`` (edge features included), computed per edge in plain torch ops
        (explanations and small graphs)."""
        raise NotImplementedError

    def attend(self, layer, parts: Parts, csr: EdgeCSR, edge_index: Tensor, edge_feat: Optional[Tensor],
               attn_bias: Optional[Tensor], batch: Optional[Tensor], want_alpha: bool,
               num_src: Optional[int]) -> Tuple[Tensor, Optional[Tensor]]:
        """Edge attention of the projected parts with the layer's normalization: ``(out (N, H, C),
        alpha (E, H) or None)``. ``num_src`` (bipartite): targets and sources are stacked as one node
        set ``[targets; sources]``. With ``weights_grad`` (PyG's convs): dropout in training scores the
        weights first, drops them by ``F.dropout`` in edge order (PyG's draws), then aggregates."""
        q = parts.dst
        N, H, C = q.shape
        k, v = self.key_value(parts)
        if num_src is not None:
            q, k, v = stacked(q, 0, num_src), stacked(k, N, 0), stacked(v, N, 0)  # (N + N_src, H, C)
        edge_value = edge_feat if self.edge_values else None
        kw = dict(csr=csr, bias=attn_bias, edge_key=edge_feat, batch=batch, impl=layer.impl,
                  **self.kernel_options(layer))
        p_drop = layer.dropout if layer.training else 0.0
        if layer.weights_grad and self.explicit_small_graphs(layer, csr, v):
            out, alpha, used = self.explicit(layer, q, k, v, csr, edge_index, N, edge_feat, attn_bias, num_src)
            alpha = used if layer.returns_dropped_weights else alpha
        elif layer.weights_grad and p_drop > 0.0:
            no_values = v.new_zeros(1, 1, 1).expand(v.size(0), H, 1)  # (N, H, 1): only alpha is wanted
            _, alpha = edge_attention_prechecked(q, k, no_values, return_attention_weights=True, **kw)
            alpha = self.alpha_with_grad(layer, alpha, q, k, csr, attn_bias, edge_feat)
            used = F.dropout(alpha, p_drop, True)
            ei = plain_tensor(edge_index).long()
            src = ei[0] if num_src is None else ei[0] + N  # stacked [targets; sources]
            out = aggregate(used, v, csr, src, ei[1], edge_value=edge_value, impl=layer.impl)
            alpha = used if layer.returns_dropped_weights else alpha
        else:
            run = (edge_attention_prechecked if layer.normalization == "softmax"
                   else partial(normalized_edge_attention, normalization=layer.normalization))
            res = run(q, k, v, edge_value=edge_value, dropout=layer.dropout, training=layer.training,
                      return_attention_weights=want_alpha, **kw)
            out, alpha = (res if want_alpha else (res, None))
            if alpha is not None and layer.weights_grad and torch.is_grad_enabled():
                alpha = self.alpha_with_grad(layer, alpha, q, k, csr, attn_bias, edge_feat)
        return (out[:N] if num_src is not None else out), alpha

    def explicit_small_graphs(self, layer, csr: EdgeCSR, v: Tensor) -> bool:
        """Whether :meth:`attend` with ``weights_grad`` runs :meth:`explicit` (PyG's own per-edge
        ops) instead of the kernels: for scores without a fused kernel, on small graphs."""
        return False

    def explicit(self, layer, q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR, edge_index: Tensor, N: int,
                 edge_feat: Optional[Tensor], attn_bias: Optional[Tensor], num_src: Optional[int]):
        """The attention in plain torch ops with ``(E, H, C)`` temporaries (PyG's own computation):
        ``(out, alpha before dropout, alpha after)``, differentiable. For small graphs only."""
        ei = plain_tensor(edge_index).long()
        src, dst = (ei[0] if num_src is None else ei[0] + N), ei[1]
        key = k.index_select(0, src)  # (E, H, C)
        if edge_feat is not None:
            key = key + edge_feat
        s = self.edge_scores(layer, q, key, dst)  # (E, H)
        if attn_bias is not None:
            s = s + attn_bias
        alpha = edge_softmax(s, dst, q.size(0))
        used = F.dropout(alpha, layer.dropout, True) if layer.training and layer.dropout > 0 else alpha
        out = aggregate(used, v, csr, src, dst, edge_value=edge_feat if self.edge_values else None)
        return out, alpha, used

    def alpha_with_grad(self, layer, alpha: Tensor, q: Tensor, k: Tensor, csr: EdgeCSR,
                        attn_bias: Optional[Tensor], edge_key: Optional[Tensor]) -> Tensor:
        """The kernel's detached ``alpha`` as a differentiable function of the score inputs."""
        H, C = q.shape[1:]
        opts = self.kernel_options(layer)
        return weights_with_grad(alpha, q, k, csr, bias=attn_bias, edge_key=edge_key, att=opts.get("att"),
                                 score=self.kernel, scale=1.0 / math.sqrt(C), negative_slope=layer.negative_slope)

    def explain(self, layer, parts: Parts, ei: Tensor, edge_feat: Optional[Tensor], attn_bias: Optional[Tensor],
                N: int, mask: Tensor) -> Tuple[Tensor, Tensor]:
        """The attention with an explainer's edge mask on every message (PyG's ``explain_message``),
        by the differentiable per-edge path of :mod:`graphattn.nn.attention.explain`."""
        k, v = self.key_value(parts)
        key = k[ei[0]] if edge_feat is None else k[ei[0]] + edge_feat  # (E, H, C)
        value = v[ei[0]] if not self.edge_values or edge_feat is None else v[ei[0]] + edge_feat  # (E, H, C')
        s = self.edge_scores(layer, parts.dst, key, ei[1])  # (E, H)
        if attn_bias is not None:
            s = s + attn_bias
        return masked_edge_attention(s, value, ei[1], N, mask, dropout=layer.dropout, training=layer.training)


#: the attention scores of :class:`~graphattn.nn.attention.GraphSelfAttention`, by name
SCORES: Registry = Registry("score", EdgeScore)
