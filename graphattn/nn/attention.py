"""GraphSelfAttention: multi-head self-attention restricted to a graph's edges (PyG conv API)."""
from __future__ import annotations

import math
import warnings
from functools import partial
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import Linear as PyGLinear
from torch_geometric.nn import MessagePassing

from graphattn.functional import EDGE_IMPLS, check_all_finite, edge_attention
from graphattn.nn.explain_masks import input_edge_alpha, layer_edge_mask, masked_edge_attention
from graphattn.ops.chunked import SCORES
from graphattn.ops.csr import EdgeCSR, as_edge_index, plain_tensor, to_csr
from graphattn.ops.normalization import NORMALIZATIONS, normalized_edge_attention
from graphattn.utils.validation import (check_bias_dtype, check_dtype, check_edge_index, check_features,
                                        check_row_index, check_tensor_shape, refuse_tracing)

__all__ = ["GraphSelfAttention"]


def _channel_pair(in_channels) -> Tuple[int, int]:
    """``(F_src, F_dst)`` from an int or a pair; -1 = inferred on the first call (lazy)."""
    pair = tuple(in_channels) if isinstance(in_channels, (tuple, list)) else (in_channels, in_channels)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and (v >= 1 or v == -1)
                                 for v in pair):
        raise ValueError(f"in_channels must be a positive int, -1 (inferred on the first call) or a pair "
                         f"(F_src, F_dst) of those, got {in_channels!r}")
    return pair


def _linear(in_channels: int, out_channels: int, bias: bool) -> nn.Module:
    """``nn.Linear``, or PyG's ``Linear`` (same initialisation) when the width is -1 (lazy)."""
    if in_channels == -1:
        return PyGLinear(-1, out_channels, bias=bias)
    return nn.Linear(in_channels, out_channels, bias=bias)


def _split_input(x) -> Tuple[Tensor, Tensor, bool]:
    """``(x_src, x_dst, bipartite)`` from ``x`` or a pair ``(x_src, x_dst)`` (PyG's PairTensor).
    A pair of one tensor twice is the ordinary (non-bipartite) case."""
    if not isinstance(x, (tuple, list)):
        return x, x, False
    if len(x) != 2:
        raise ValueError(f"x must be a tensor or a pair (x_src, x_dst), got a {type(x).__name__} of {len(x)}")
    x_src, x_dst = x
    if x_dst is None:
        raise ValueError("x[1] (x_dst) is None: graph self-attention takes its queries and root term "
                         "from the target nodes' features; pass (x_src, x_dst)")
    return x_src, x_dst, x_src is not x_dst


class GraphSelfAttention(MessagePassing):
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
        in_channels (int or tuple): input feature size F, or ``(F_src, F_dst)`` for a
            bipartite graph whose two node sets have different widths (as PyG's convs); ``-1``
            (either side) infers the width on the first call (PyG's lazy ``Linear``). With a
            positive int the q/k/v (or target/source) projections are one fused ``lin_qkv``; otherwise
            they are PyG-named ``lin_query``/``lin_key``/``lin_value`` (dot) or ``lin_r``
            (target) / ``lin_l`` (source) (additive).
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
            :mod:`graphattn.ops.normalization` (non-softmax ones: batched matmuls on complete
            graphs, else a chunked edge path; no fused kernel).

    Shapes:
        - x: ``(N, F)``, or ``((N_src, F_src), (N_dst, F_dst))`` (bipartite: ``edge_index[0]``
          indexes sources, ``edge_index[1]`` targets; N = N_dst below); edge_index: ``(2, E)``;
          edge_attr: ``(E, D)``
        - output: ``(N, H*C)`` if ``concat`` else ``(N, C)``
        - attention weights (with ``return_attention_weights=True``): ``(edge_index, alpha)``
          with the caller's ``edge_index`` unchanged (no self-loops are added) and alpha ``(E, H)``,
          detached (no gradient, unlike PyG's).

    Gradients: second derivatives (``create_graph=True``, gradient penalties) are exact on
    the fused and chunked backends; the SDPA one (complete graphs, ``impl="auto"|"dense"``)
    raises on CPU, so use ``impl="fused"`` or ``"chunked"`` there. ``torch.compile(layer)``
    works: the fused kernels (C++ on CPU, Triton on CUDA) run eagerly behind a graph break,
    the rest is compiled.

    PyG interop: it is a ``MessagePassing`` subclass (it never calls ``propagate``; the
    attention kernels replace message and aggregate), so ``to_hetero`` makes one copy per edge
    type and ``HeteroConv`` takes it. PyG's ``Explainer`` (GNNExplainer, ...) works: while its
    edge mask is set, each message ``α_ij·v_j`` is scaled by the mask as PyG's convs do it,
    computed by a plain per-edge PyTorch path (:mod:`graphattn.nn.explain_masks`; ``(E, H, C)``
    temporaries, fine for the small graphs explanations run on).
    """

    #: set by a model that replaces its input's self-loops (``NodeClassifier(self_loops=True)``):
    #: explainer masks then map onto a loop run that skips global-token nodes
    _explain_loops_replaced: bool = False
    #: the model's input edge_index while it runs with message hooks and its loops replaced
    #: (NodeClassifier(self_loops=True)): the hooks then get alpha per input edge
    _hook_input_edges: Optional[Tensor] = None

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int, heads: int = 1,
                 concat: bool = True, dropout: float = 0.0, edge_dim: Optional[int] = None,
                 bias: bool = True, score: str = "dot", root_weight: bool = True,
                 negative_slope: float = 0.2, impl: str = "auto", normalization: str = "softmax"):
        # A MessagePassing subclass so that PyG treats it as a conv: to_hetero() turns it into
        # one copy per edge type, HeteroConv and summary() see a conv. It never calls
        # propagate(): the attention kernels replace message/aggregate.
        super().__init__(aggr=None, node_dim=0)
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        if normalization != "softmax" and impl not in ("auto", "chunked"):
            raise ValueError(f"impl={impl!r} is softmax-only; normalization={normalization!r} "
                             "needs impl='auto' or 'chunked'")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        if impl not in EDGE_IMPLS:
            raise ValueError(f"impl must be one of {EDGE_IMPLS}, got {impl!r}")
        if impl == "fused" and score != "dot":  # found here rather than at the first forward
            raise ValueError(f"impl='fused' supports only score='dot', got score={score!r}: use impl='auto' "
                             "or 'chunked' (attention dropout is inactive in eval; in training it needs those too)")
        f_src, f_dst = _channel_pair(in_channels)
        for name, val in (("out_channels", out_channels), ("heads", heads)):
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        if edge_dim is not None and (not isinstance(edge_dim, int) or edge_dim < 1):
            raise ValueError(f"edge_dim must be a positive int or None, got {edge_dim!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if (isinstance(negative_slope, bool) or not isinstance(negative_slope, (int, float))
                or not math.isfinite(negative_slope)):
            raise ValueError(f"negative_slope must be a finite number, got {negative_slope!r}")
        self.in_channels = tuple(in_channels) if isinstance(in_channels, (tuple, list)) else in_channels
        self.out_channels, self.heads = out_channels, heads
        self.concat, self.dropout, self.edge_dim, self.score = concat, dropout, edge_dim, score
        self.root_weight, self.negative_slope, self.impl = root_weight, negative_slope, impl
        self.normalization = normalization
        HC = heads * out_channels
        n_proj = 3 if score == "dot" else 2
        if isinstance(self.in_channels, int) and self.in_channels > 0:
            # One fused projection for all of q, k, v (dot) or target/source parts (additive):
            # a single GEMM is faster than three on small batches of molecules.
            self.lin_qkv = nn.Linear(f_src, n_proj * HC, bias=bias)
            self.lin_query = self.lin_key = self.lin_value = self.lin_l = self.lin_r = None
        else:
            # (F_src, F_dst) or lazy (-1) widths: one projection per role, on its side, with
            # PyG's names (TransformerConv: lin_query/key/value; GATv2Conv: lin_l source, lin_r
            # target) and PyG's Linear, which infers a -1 width on the first call.
            self.lin_qkv = None
            side = {"dst": f_dst, "src": f_src}
            roles = ({"lin_query": "dst", "lin_key": "src", "lin_value": "src"} if score == "dot"
                     else {"lin_r": "dst", "lin_l": "src"})
            for name in ("lin_query", "lin_key", "lin_value", "lin_l", "lin_r"):
                setattr(self, name, _linear(side[roles[name]], HC, bias) if name in roles else None)
        self.att = nn.Parameter(torch.empty(heads, out_channels)) if score == "additive" else None
        self.lin_edge = nn.Linear(edge_dim, HC, bias=False) if edge_dim is not None else None
        self.lin_skip = (_linear(f_dst, HC if concat else out_channels, bias) if root_weight else None)
        self.reset_parameters()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The projections are one fused ``lin_qkv`` for an int in_channels and PyG's per-role
        # ``lin_query/key/value`` (``lin_r/lin_l`` additive) for -1 or (F_src, F_dst) widths: either
        # layout of a state dict (ours of the other form, or TransformerConv's) loads into both.
        roles = ("lin_query", "lin_key", "lin_value") if self.score == "dot" else ("lin_r", "lin_l")
        skip = [k for k in (f"{prefix}lin_skip.weight", f"{prefix}lin_skip.bias") if k in state_dict]
        if self.lin_skip is None and skip and all(f"{prefix}{r}.weight" in state_dict for r in roles):
            # PyG's TransformerConv builds lin_skip even with root_weight=False (and never uses it)
            warnings.warn(f"{prefix or 'state dict'}: lin_skip.* ignored: this layer has root_weight=False "
                          "(PyG's TransformerConv keeps an unused lin_skip then)", stacklevel=2)
            for k in skip:
                state_dict.pop(k)
        for p in ("weight", "bias"):
            fused, parts = f"{prefix}lin_qkv.{p}", [f"{prefix}{r}.{p}" for r in roles]
            if self.lin_qkv is not None and fused not in state_dict and all(k in state_dict for k in parts):
                state_dict[fused] = torch.cat([state_dict.pop(k) for k in parts])
            elif self.lin_qkv is None and fused in state_dict and not any(k in state_dict for k in parts):
                for k, w in zip(parts, state_dict.pop(fused).chunk(len(roles))):
                    state_dict[k] = w
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _weight_dtype(self) -> Optional[torch.dtype]:
        """dtype of the layer's weights (None while lazy ``-1`` widths are uninitialised)."""
        for lin in (self.lin_qkv, self.lin_query, self.lin_key, self.lin_r, self.lin_l):  # no module walk
            if lin is not None and not isinstance(lin.weight, nn.parameter.UninitializedParameter):
                return lin.weight.dtype
        return None

    def reset_parameters(self) -> None:
        for lin in (self.lin_qkv, self.lin_query, self.lin_key, self.lin_value, self.lin_l, self.lin_r,
                    self.lin_edge, self.lin_skip):
            if lin is not None:
                lin.reset_parameters()  # PyG's Linear skips a lazy (not yet shaped) weight
        if self.att is not None:
            nn.init.xavier_uniform_(self.att)

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]], edge_index: Tensor,
                edge_attr: Optional[Tensor] = None, return_attention_weights: bool = False, *,
                attn_bias: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                edge_attr_index: Optional[Tensor] = None,
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        """Args: ``x`` (N, F), or a pair ``(x_src, x_dst)`` for a bipartite graph (as in PyG:
        ``edge_index[0]`` indexes ``x_src``, ``edge_index[1]`` indexes ``x_dst``; keys and
        values come from sources, queries and the root term from targets; the output has one
        row per target), ``edge_index`` (2, E), or PyG's transposed sparse adjacency ``adj_t``
        ``(N, N_src)`` as a torch.sparse COO/CSR/CSC tensor (entry ``[i, j]`` for an edge j -> i;
        values ignored; per-edge inputs and the returned ``alpha`` follow its storage order, and
        ``(adj_t, alpha)`` is returned as PyG's TransformerConv does; an uncoalesced COO ``adj_t``
        comes back coalesced, the order ``alpha`` is in, and is refused with per-edge inputs), ``edge_attr`` (E, D) when ``edge_dim``
        is set, ``attn_bias`` optional (E, H) additive score bias (e.g. a structural bias),
        ``batch`` optional (N,) graph ids: lets batches of complete graphs use SDPA (not with
        a bipartite ``x``), ``edge_attr_index`` optional (E,) integer: ``edge_attr`` is then a
        ``(U, D)`` table of distinct rows (e.g. bond types) and edge e uses row ``edge_attr_index[e]``; the edge
        projection runs on the U rows, not on E (same result as ``edge_attr[edge_attr_index]``).

        ``x`` and ``edge_attr`` must be finite and ``attn_bias`` free of NaN and +inf
        (``-inf`` hides an edge), else ``ValueError``: NaN would silently zero (fused kernel)
        or poison (chunked path) the whole target row. With ``return_attention_weights`` the
        returned ``alpha`` ``(E, H)`` is detached: a loss on it gets no gradient."""
        refuse_tracing()
        if self.explain and self.normalization != "softmax":
            raise NotImplementedError(f"PyG Explainer edge masks need normalization='softmax', the layer has "
                                      f"{self.normalization!r} (the masks stay set after a failed "
                                      "explanation: torch_geometric.explain.algorithm.utils.clear_masks(model))")
        x_src, x_dst, bipartite = _split_input(x)
        wdtype = self._check_nodes(x_src, x_dst, bipartite, batch)
        # PyG's sparse adj_t -> (2, E) in its storage order, cached per tensor (adj: returned back)
        edge_index, adj = as_edge_index(edge_index, x_dst.size(0), x_src.size(0),
                                        (edge_attr, attn_bias, edge_attr_index))
        N, H = x_dst.size(0), self.heads
        check_edge_index(edge_index, N, check_range=False)
        # cached per edge_index tensor (range-checked on build); a bipartite graph is laid out
        # as one node set [targets; sources], see to_csr
        csr = to_csr(edge_index, N, num_src=x_src.size(0) if bipartite else None)
        E = edge_index.size(1)
        if attn_bias is not None:
            check_tensor_shape(attn_bias, (E, H), "attn_bias")
            check_bias_dtype(attn_bias)
        edge_kv = self._edge_features(edge_attr, edge_attr_index, E, wdtype)  # (E, H, C) or None
        # The user's tensors only, one device sync (skipped under torch.compile); q, k, v and
        # the projected edge features derive from them, so the attention call skips its checks.
        inputs = ([("x[0] (x_src)", x_src, False), ("x[1] (x_dst)", x_dst, False)] if bipartite
                  else [("x", x_src, False)])
        check_all_finite(inputs + [("edge_attr", edge_attr if self.lin_edge is not None else None, False),
                                   ("attn_bias", attn_bias, True)])
        dst_part, src_parts = self._project(x_src, x_dst)  # (N, H, C), 1-2 x (N_src, H, C)
        # PyG's message hooks (AttentionExplainer reads msg_kwargs["alpha"]) get the weights
        want_alpha = return_attention_weights or bool(self._message_forward_hooks)
        if self.explain:  # a PyG Explainer's edge mask is set (torch_geometric.explain)
            out, alpha = self._explained(dst_part, src_parts, edge_index, edge_kv, attn_bias, N)
        else:
            out, alpha = self._attend(dst_part, src_parts, csr, edge_kv, attn_bias, batch, want_alpha,
                                      x_src.size(0) if bipartite else None)
        return self._finish(out, alpha, x_dst, edge_index if adj is None else adj, return_attention_weights)

    def _check_nodes(self, x_src: Tensor, x_dst: Tensor, bipartite: bool,
                     batch: Optional[Tensor]) -> Optional[torch.dtype]:
        """Shapes and dtypes of the node features (values: one sync later); returns the
        weights' dtype (None while lazy ``-1`` widths are uninitialised)."""
        f_src, f_dst = _channel_pair(self.in_channels)
        check_features(x_src, f_src if f_src > 0 else None, "x[0] (x_src)" if bipartite else "x",
                       check_values=False)  # values: one sync in forward
        if bipartite:
            check_features(x_dst, f_dst if f_dst > 0 else None, "x[1] (x_dst)", check_values=False)
            if batch is not None:
                raise ValueError("batch is not supported with a bipartite x=(x_src, x_dst)")
        elif f_dst != f_src and f_dst > 0:
            check_features(x_dst, f_dst, "x", check_values=False)
        wdtype = self._weight_dtype()
        if wdtype is not None:
            check_dtype(x_src, wdtype, "x[0] (x_src)" if bipartite else "x")
            if bipartite:
                check_dtype(x_dst, wdtype, "x[1] (x_dst)")
        return wdtype

    def _edge_features(self, edge_attr: Optional[Tensor], edge_attr_index: Optional[Tensor], E: int,
                       wdtype: Optional[torch.dtype]) -> Optional[Tensor]:
        """The projected edge features ``(E, H, C)`` added to keys and values (None without
        ``edge_dim``); with ``edge_attr_index`` the projection runs on the ``(U, D)`` table."""
        H, C = self.heads, self.out_channels
        if self.lin_edge is None:
            if edge_attr is not None:
                raise ValueError("edge_attr was given but the layer has no edge_dim; "
                                 "build it with edge_dim=D to use edge features")
            if edge_attr_index is not None:
                raise ValueError("edge_attr_index was given but the layer has no edge_dim")
            return None
        if edge_attr is None:
            raise ValueError(f"edge_attr is required: the layer was built with edge_dim={self.edge_dim}")
        if wdtype is not None:
            check_dtype(edge_attr, wdtype, "edge_attr")
        if edge_attr.dim() == 1 and self.edge_dim == 1:
            edge_attr = edge_attr[:, None]
        if edge_attr_index is None:
            check_tensor_shape(edge_attr, (E, self.edge_dim), "edge_attr")
            return self.lin_edge(edge_attr).view(E, H, C)  # (E, H, C)
        check_tensor_shape(edge_attr, (edge_attr.size(0), self.edge_dim), "edge_attr")
        check_row_index(edge_attr_index, E, edge_attr.size(0), "edge_attr_index")
        return self.lin_edge(edge_attr).view(-1, H, C).index_select(0, edge_attr_index)  # (E, H, C)

    def _attend(self, dst_part: Tensor, src_parts: List[Tensor], csr: EdgeCSR, edge_kv: Optional[Tensor],
                attn_bias: Optional[Tensor], batch: Optional[Tensor], want_alpha: bool,
                num_src: Optional[int]) -> Tuple[Tensor, Optional[Tensor]]:
        """Edge attention of the projected parts with the layer's normalization: ``(out (N, H, C),
        alpha (E, H) or None)``. ``num_src`` (bipartite): targets and sources are stacked as one
        node set ``[targets; sources]``, queries on targets, keys and values on sources."""
        N, H, C = dst_part.shape
        if num_src is not None:
            dst_part = torch.cat([dst_part, dst_part.new_zeros(num_src, H, C)])  # (N + N_src, H, C)
            src_parts = [torch.cat([p.new_zeros(N, H, C), p]) for p in src_parts]
        attend = (partial(edge_attention, _check=False) if self.normalization == "softmax"
                  else partial(normalized_edge_attention, normalization=self.normalization))
        if self.score == "dot":
            k, v = src_parts
            res = attend(dst_part, k, v, csr=csr, bias=attn_bias, edge_key=edge_kv,
                         edge_value=edge_kv, dropout=self.dropout, training=self.training,
                         return_attention_weights=want_alpha, batch=batch,
                         impl=self.impl)
        else:
            (xl,) = src_parts  # target part, source part
            res = attend(dst_part, xl, xl, csr=csr, bias=attn_bias, edge_key=edge_kv,
                         score="additive", att=self.att, negative_slope=self.negative_slope,
                         dropout=self.dropout, training=self.training,
                         return_attention_weights=want_alpha, batch=batch,
                         impl=self.impl)
        out, alpha = (res if want_alpha else (res, None))
        if num_src is not None:
            out = out[:N]  # (N, H, C): the target rows
        return out, alpha

    def _finish(self, out: Tensor, alpha: Optional[Tensor], x_dst: Tensor, edge_index: Tensor,
                return_attention_weights: bool):
        """Heads concatenated or averaged, plus the root term; the PyG return contract. PyG's
        message forward hooks are called with ``({"alpha": alpha},)`` (``(E, H)``, detached; no
        per-edge messages exist, so their output argument is None; inside
        ``NodeClassifier(self_loops=True)`` PyG's explainers' hooks get ``alpha`` per edge of the
        model's input, its self-loops reading the loops that replaced them; other hooks get the
        layer's own edge order)."""
        if self._message_forward_hooks:
            hook_alpha = alpha
            if alpha is not None and self._hook_input_edges is not None:
                hook_alpha = input_edge_alpha(alpha, self._hook_input_edges)
            for hook in self._message_forward_hooks.values():  # only PyG's explainers read input-edge order
                pyg = getattr(hook, "__module__", "").startswith("torch_geometric.explain")
                hook(self, ({"alpha": hook_alpha if pyg else alpha},), None)
        N, H, C = out.shape
        out = out.reshape(N, H * C) if self.concat else out.mean(dim=1)  # (N, H*C) | (N, C)
        if self.lin_skip is not None:
            out = out + self.lin_skip(x_dst)
        if return_attention_weights:
            return out, (edge_index, alpha)
        return out

    def _explained(self, q: Tensor, src_parts: List[Tensor], edge_index: Tensor, edge_kv: Optional[Tensor],
                   attn_bias: Optional[Tensor], N: int) -> Tuple[Tensor, Tensor]:
        """The attention with the explainer's edge mask on every message (PyG's
        ``explain_message``), by the differentiable per-edge path of :mod:`graphattn.nn.explain_masks`."""
        ei = plain_tensor(edge_index).long()
        mask = layer_edge_mask(self._edge_mask, self._loop_mask, self._apply_sigmoid, ei, N,
                               loops_replaced=self._explain_loops_replaced)
        k, v = src_parts if self.score == "dot" else (src_parts[0], src_parts[0])
        return masked_edge_attention(q, k, v, ei[0], ei[1], mask, edge_key=edge_kv,
                                     edge_value=edge_kv if self.score == "dot" else None, bias=attn_bias,
                                     score=self.score, att=self.att, negative_slope=self.negative_slope,
                                     dropout=self.dropout, training=self.training)

    def _project(self, x_src: Tensor, x_dst: Tensor) -> Tuple[Tensor, List[Tensor]]:
        """Query (dot) or target part (additive) of ``x_dst`` ``(N, H, C)``, and key + value
        (dot) or source part (additive) of ``x_src``, each ``(N_src, H, C)`` and contiguous."""
        H, C = self.heads, self.out_channels
        if self.lin_qkv is None:
            dst_lin, src_lins = ((self.lin_query, (self.lin_key, self.lin_value)) if self.score == "dot"
                                 else (self.lin_r, (self.lin_l,)))
            return (dst_lin(x_dst).view(-1, H, C),  # (N, H, C)
                    [lin(x_src).view(-1, H, C) for lin in src_lins])  # (N_src, H, C) each
        # One (n*H*C, F) weight, applied part by part: each of q, k, v comes out contiguous
        # (N, H, C), so no kernel has to copy a strided view of a fused (N, n*H*C) output.
        n_proj = 3 if self.score == "dot" else 2
        W = self.lin_qkv.weight.chunk(n_proj)
        b = self.lin_qkv.bias.chunk(n_proj) if self.lin_qkv.bias is not None else [None] * n_proj
        return (F.linear(x_dst, W[0], b[0]).view(-1, H, C),
                [F.linear(x_src, W[i], b[i]).view(-1, H, C) for i in range(1, n_proj)])

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
