"""GraphSelfAttention: multi-head self-attention restricted to a graph's edges (PyG conv API)."""
from __future__ import annotations

from functools import partial
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .csr import to_csr
from .functional import EDGE_IMPLS, SCORES, check_all_finite, edge_attention
from .normalization import NORMALIZATIONS, normalized_edge_attention
from .validation import check_edge_index, check_features, check_row_index, check_tensor_shape

__all__ = ["GraphSelfAttention"]


class GraphSelfAttention(nn.Module):
    r"""Multi-head graph self-attention (Vaswani et al. 2017 restricted to edges, as in
    Dwivedi & Bresson 2020 / Shi et al. 2021 ``TransformerConv``; additive score from
    Brody et al. 2022, GATv2).

    For each target node i and head h, over its incoming edges j -> i::

        dot:       s_ij = (W_q x_i) · (W_k x_j + W_e e_ij) / √C
        additive:  s_ij = aᵀ LeakyReLU(W_r x_i + W_l x_j + W_e e_ij)
        α_ij = softmax_j(s_ij),   out_i = W_o x_i + Σ_j α_ij (W_v x_j + W_e e_ij)

    (``W_o x_i`` only with ``root_weight``; in the additive form the value is ``W_l x_j``
    as in GATv2 and edge features enter the score only.) Heads are concatenated or
    averaged. A node without incoming edges gets only its root term (zeros without it).

    Args:
        in_channels (int): input feature size F.
        out_channels (int): channels per head C.
        heads (int, default 1): number of heads H.
        concat (bool, default True): concatenate heads (``H*C`` outputs) or average them (``C``).
        dropout (float, default 0.0): dropout on attention weights during training.
        edge_dim (int, optional): edge feature size D; projected into keys and values.
        bias (bool, default True): bias terms in the projections.
        score (str, default "dot"): ``"dot"`` or ``"additive"``.
        root_weight (bool, default True): add a linear skip term of the node itself.
        negative_slope (float, default 0.2): LeakyReLU slope of the additive score.
        impl (str, default "auto"): edge attention backend, see
            :func:`graphattn.functional.edge_attention`.
        normalization (str, default "softmax"): ``"softmax"``, ``"relu"`` (ReLU(s)/deg) or
            ``"sigmoid"`` (σ(s - log deg)) over the incoming edges, see
            :mod:`graphattn.normalization` (non-softmax ones: batched matmuls on complete
            graphs, else a chunked edge path; no fused kernel).

    Shapes:
        - x: ``(N, F)``; edge_index: ``(2, E)``; edge_attr: ``(E, D)``
        - output: ``(N, H*C)`` if ``concat`` else ``(N, C)``
        - attention weights (with ``return_attention_weights=True``): ``(edge_index, alpha)``
          with the caller's ``edge_index`` unchanged (no self-loops are added) and alpha ``(E, H)``,
          detached (no gradient, unlike PyG's).

    Gradients: second derivatives (``create_graph=True``, gradient penalties) are exact on
    the fused and chunked backends; the SDPA one (complete graphs, ``impl="auto"|"dense"``)
    raises on CPU, so use ``impl="fused"`` or ``"chunked"`` there. ``torch.compile(layer)`` works: the fused kernels (C++ on CPU, Triton on
    CUDA) run eagerly behind a graph break, the rest is compiled.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 dropout: float = 0.0, edge_dim: Optional[int] = None, bias: bool = True,
                 score: str = "dot", root_weight: bool = True, negative_slope: float = 0.2,
                 impl: str = "auto", normalization: str = "softmax"):
        super().__init__()
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        if normalization != "softmax" and impl not in ("auto", "chunked"):
            raise ValueError(f"impl={impl!r} is softmax-only; normalization={normalization!r} "
                             "needs impl='auto' or 'chunked'")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        if impl not in EDGE_IMPLS:
            raise ValueError(f"impl must be one of {EDGE_IMPLS}, got {impl!r}")
        for name, val in (("in_channels", in_channels), ("out_channels", out_channels), ("heads", heads)):
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        if edge_dim is not None and (not isinstance(edge_dim, int) or edge_dim < 1):
            raise ValueError(f"edge_dim must be a positive int or None, got {edge_dim!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.dropout, self.edge_dim, self.score = concat, dropout, edge_dim, score
        self.root_weight, self.negative_slope, self.impl = root_weight, negative_slope, impl
        self.normalization = normalization
        HC = heads * out_channels
        # One fused projection for all of q, k, v (dot) or target/source parts (additive):
        # a single GEMM is faster than three on small batches of molecules.
        n_proj = 3 if score == "dot" else 2
        self.lin_qkv = nn.Linear(in_channels, n_proj * HC, bias=bias)
        self.att = nn.Parameter(torch.empty(heads, out_channels)) if score == "additive" else None
        self.lin_edge = nn.Linear(edge_dim, HC, bias=False) if edge_dim is not None else None
        self.lin_skip = (nn.Linear(in_channels, HC if concat else out_channels, bias=bias)
                         if root_weight else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_qkv.reset_parameters()
        if self.att is not None:
            nn.init.xavier_uniform_(self.att)
        if self.lin_edge is not None:
            self.lin_edge.reset_parameters()
        if self.lin_skip is not None:
            self.lin_skip.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                return_attention_weights: bool = False, *, attn_bias: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, edge_attr_index: Optional[Tensor] = None,
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        """Args: ``x`` (N, F), ``edge_index`` (2, E), ``edge_attr`` (E, D) when ``edge_dim``
        is set, ``attn_bias`` optional (E, H) additive score bias (e.g. a structural bias),
        ``batch`` optional (N,) graph ids: lets batches of complete graphs use SDPA,
        ``edge_attr_index`` optional (E,) integer: ``edge_attr`` is then a ``(U, D)`` table of
        distinct rows (e.g. bond types) and edge e uses row ``edge_attr_index[e]``; the edge
        projection runs on the U rows, not on E (same result as ``edge_attr[edge_attr_index]``).

        ``x`` and ``edge_attr`` must be finite and ``attn_bias`` free of NaN and +inf
        (``-inf`` hides an edge), else ``ValueError``: NaN would silently zero (fused kernel)
        or poison (chunked path) the whole target row. With ``return_attention_weights`` the
        returned ``alpha`` ``(E, H)`` is detached: a loss on it gets no gradient."""
        check_features(x, self.in_channels, "x", check_values=False)  # values: one sync below
        N, H, C = x.size(0), self.heads, self.out_channels
        check_edge_index(edge_index, N, check_range=False)
        csr = to_csr(edge_index, N)  # cached per edge_index tensor (range-checked on build)
        E = edge_index.size(1)
        if attn_bias is not None:
            check_tensor_shape(attn_bias, (E, H), "attn_bias")
        edge_kv = None
        if self.lin_edge is not None:
            if edge_attr is None:
                raise ValueError(f"edge_attr is required: the layer was built with edge_dim={self.edge_dim}")
            if edge_attr.dim() == 1:
                edge_attr = edge_attr[:, None]
            if edge_attr_index is None:
                check_tensor_shape(edge_attr, (E, self.edge_dim), "edge_attr")
                edge_kv = self.lin_edge(edge_attr).view(E, H, C)  # (E, H, C)
            else:
                check_tensor_shape(edge_attr, (edge_attr.size(0), self.edge_dim), "edge_attr")
                check_row_index(edge_attr_index, E, edge_attr.size(0), "edge_attr_index")
                edge_kv = self.lin_edge(edge_attr).view(-1, H, C).index_select(0, edge_attr_index)
        elif edge_attr is not None:
            raise ValueError("edge_attr was given but the layer has no edge_dim; "
                             "build it with edge_dim=D to use edge features")
        elif edge_attr_index is not None:
            raise ValueError("edge_attr_index was given but the layer has no edge_dim")
        # The user's tensors only, one device sync (skipped under torch.compile); q, k, v and
        # the projected edge features derive from them, so the attention call skips its checks.
        check_all_finite([("x", x, False), ("edge_attr", edge_attr if self.lin_edge is not None else None, False),
                          ("attn_bias", attn_bias, True)])
        # One (n*H*C, F) weight, applied part by part: each of q, k, v comes out contiguous
        # (N, H, C), so no kernel has to copy a strided view of a fused (N, n*H*C) output.
        n_proj = 3 if self.score == "dot" else 2
        W, b = self.lin_qkv.weight.chunk(n_proj), (self.lin_qkv.bias.chunk(n_proj)
                                                   if self.lin_qkv.bias is not None else [None] * n_proj)
        parts = [F.linear(x, W[i], b[i]).view(N, H, C) for i in range(n_proj)]  # n x (N, H, C)
        attend = (partial(edge_attention, _check=False) if self.normalization == "softmax"
                  else partial(normalized_edge_attention, normalization=self.normalization))
        if self.score == "dot":
            q, k, v = parts
            res = attend(q, k, v, csr=csr, bias=attn_bias, edge_key=edge_kv,
                         edge_value=edge_kv, dropout=self.dropout, training=self.training,
                         return_attention_weights=return_attention_weights, batch=batch,
                         impl=self.impl)
        else:
            xr, xl = parts  # target part, source part
            res = attend(xr, xl, xl, csr=csr, bias=attn_bias, edge_key=edge_kv,
                         score="additive", att=self.att, negative_slope=self.negative_slope,
                         dropout=self.dropout, training=self.training,
                         return_attention_weights=return_attention_weights, batch=batch,
                         impl=self.impl)
        out, alpha = (res if return_attention_weights else (res, None))
        out = out.reshape(N, H * C) if self.concat else out.mean(dim=1)  # (N, H*C) | (N, C)
        if self.lin_skip is not None:
            out = out + self.lin_skip(x)
        if return_attention_weights:
            return out, (edge_index, alpha)
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
