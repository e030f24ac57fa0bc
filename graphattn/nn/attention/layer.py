"""GraphSelfAttention: multi-head self-attention restricted to a graph's edges (PyG conv API)."""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.inits import zeros

from graphattn.nn.attention.explain import input_edge_alpha, layer_edge_mask
from graphattn.nn.attention.inputs import attention_graph, check_nodes, check_options, check_values, node_counts
from graphattn.nn.attention.projections import channel_pair, empty_modules, glorot_linear, make_linear, split_input
from graphattn.nn.attention.score import SCORES, EdgeScore
from graphattn.nn.self_loops import check_fill_value
from graphattn.ops.csr import plain_tensor, to_csr
from graphattn.utils.validation import check_bias_dtype, check_tensor_shape, refuse_tracing

__all__ = ["GraphSelfAttention"]


class GraphSelfAttention(MessagePassing):
    r"""Multi-head graph self-attention (Vaswani et al. 2017 restricted to edges, as in
    Dwivedi & Bresson 2020 / Shi et al. 2021 ``TransformerConv``; additive score from
    Brody et al. 2022, GATv2; per-node scalar score from Veličković et al. 2018, GAT).

    For each target node i and head h, over its incoming edges j -> i::

        dot:       s_ij = (W_q x_i) · (W_k x_j + W_e e_ij) / √C
        additive:  s_ij = aᵀ LeakyReLU(W_r x_i + W_l x_j + W_e e_ij)
        gat:       s_ij = LeakyReLU(a_tᵀ W x_i + a_sᵀ W x_j + a_eᵀ W_e e_ij)
        α_ij = softmax_j(s_ij),   out_i = W_o x_i + Σ_j α_ij (W_v x_j + W_e e_ij)

    (``W_o x_i`` only with ``root_weight``; in the additive and gat forms the value is
    ``W_l x_j`` / ``W x_j`` as in GATv2 / GAT and edge features enter the score only.) Heads are
    concatenated or averaged. A node without incoming edges gets only its root term (zeros without it).
    ``GATConv``, ``GATv2Conv`` and ``TransformerConv`` of :mod:`graphattn.nn.conv` are this layer
    configured as PyG's classes (``gat`` / ``additive`` / ``dot`` with the options below).

    Args:
        in_channels (int or tuple): input feature size F, or ``(F_src, F_dst)`` for a
            bipartite graph whose two node sets have different widths (as PyG's convs); ``-1``
            (either side) infers the width on the first call (PyG's lazy ``Linear``). Module
            layout per score: see :mod:`graphattn.nn.attention` (one class per score).
        out_channels (int): channels per head C.
        heads (int, default 1): number of heads H.
        concat (bool, default True): concatenate heads (``H*C`` outputs) or average them (``C``).
        dropout (float, default 0.0): dropout on attention weights during training.
        edge_dim (int, optional): edge feature size D; projected into keys and values (dot) or
            into the score (additive, gat: an ``(E, H)`` term, never ``(E, H, C)``).
        bias (bool, default True): bias terms in the projections (``gat`` has none, as GATConv).
        score (str or EdgeScore, default "dot"): a registered score name (``"dot"``, ``"additive"``,
            ``"gat"``, ``"bilinear"``; :data:`graphattn.nn.attention.SCORES`) or a score object
            (:class:`~graphattn.nn.attention.score.EdgeScore`).
        root_weight (bool, default True): add a linear skip term of the node itself (``lin_skip``).
        negative_slope (float, default 0.2): LeakyReLU slope of the additive and gat scores.
        impl (str, default "auto"): edge attention backend, see
            :func:`graphattn.functional.edge_attention`. ``gat`` runs its softmax and
            aggregation on the fused kernels with its scores as an ``(E, H)`` bias; ``additive``
            has no fused kernel (chunked).
        normalization (str, default "softmax"): ``"softmax"``, ``"relu"`` (ReLU(s)/deg) or
            ``"sigmoid"`` (σ(s - log deg)) over the incoming edges, see
            :mod:`graphattn.ops.normalization` (``dot``/``additive``; no fused kernel).
        add_self_loops (bool, default False): remove the input's self-loops and add one per
            node (of the first ``min(N_src, N_dst)``) on every call, as PyG's GATConv; the looped
            graph is cached per ``edge_index`` tensor. The returned ``edge_index`` is the looped one.
        fill_value (float, Tensor or str, default "mean"): edge features of the added loops: a
            value, or a reduction (``"add"``, ``"sum"``, ``"mean"``, ``"min"``, ``"max"``, ``"mul"``)
            of the features of the edges into the node (PyG's ``add_self_loops``).
        share_weights (bool, default False): ``additive``: one projection for both sides
            (``lin_r is lin_l``), as GATv2Conv's ``share_weights``.
        beta (bool, default False): gate the root term (needs ``root_weight``):
            ``out = β x_r + (1-β) out`` with ``β = σ(w_βᵀ [out, x_r, out - x_r])`` (TransformerConv).
        residual (bool, default False): add a bias-free linear map of the target's input (``res``,
            GATConv/GATv2Conv's ``residual``; not with ``root_weight``).
        out_bias (bool, default False): a learnable bias added to the output (GATConv's ``bias``).
        weights_grad (bool, default False): the attention weights carry a gradient: the returned
            ``alpha`` is differentiable (its backward is the softmax backward and a chunked score
            backward, first order only), and attention dropout in training is ``F.dropout`` on
            ``alpha`` ``(E, H)`` in edge order, as PyG's convs draw it, with the returned ``alpha``
            the one after dropout (the values are then aggregated by the same kernels). False: the
            returned ``alpha`` is detached and dropout is drawn inside the kernel.

    Shapes:
        - x: ``(N, F)``, or ``((N_src, F_src), (N_dst, F_dst))`` (bipartite: ``edge_index[0]``
          indexes sources, ``edge_index[1]`` targets; N = N_dst below); ``gat`` also takes
          ``(x_src, None)`` (no target term; N from ``size``); edge_index: ``(2, E)``;
          edge_attr: ``(E, D)``
        - output: ``(N, H*C)`` if ``concat`` else ``(N, C)``
        - attention weights (with ``return_attention_weights=True``): ``(edge_index, alpha)``
          with the caller's ``edge_index`` (the looped one with ``add_self_loops``) and alpha
          ``(E, H)``, detached unless ``weights_grad``.

    Gradients: second derivatives (``create_graph=True``, gradient penalties) are exact on
    the fused and chunked backends; the SDPA one (complete graphs, ``impl="auto"|"dense"``)
    raises on CPU, so use ``impl="fused"`` or ``"chunked"`` there (in eager mode: compiled
    backward graphs are once-differentiable). ``torch.compile(layer, fullgraph=True)`` works: the
    fused kernels (C++ on CPU, Triton on CUDA) are custom ops it traces through, and the CSR view
    is built inside the graph (pass ``num_graphs`` to the models for a graph without breaks).

    PyG interop: it is a ``MessagePassing`` subclass (it never calls ``propagate``; the
    attention kernels replace message and aggregate), so ``to_hetero`` makes one copy per edge
    type and ``HeteroConv`` takes it. PyG's ``Explainer`` (GNNExplainer, ...) works: while its
    edge mask is set, each message ``α_ij·v_j`` is scaled by the mask as PyG's convs do it,
    computed by a plain per-edge PyTorch path (:mod:`graphattn.nn.attention.explain`; ``(E, H, C)``
    temporaries, fine for the small graphs explanations run on).

    Example::

        >>> import torch
        >>> from graphattn import GraphSelfAttention
        >>> x = torch.randn(4, 16)                                  # 4 nodes, 16 features
        >>> edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])  # a directed 4-cycle
        >>> attn = GraphSelfAttention(16, 8, heads=2)
        >>> out, (ei, alpha) = attn(x, edge_index, return_attention_weights=True)
        >>> out.shape, alpha.shape                                  # (N, H*C), (E, H)
        (torch.Size([4, 16]), torch.Size([4, 2]))
        >>> bool(torch.allclose(alpha, torch.ones(4, 2)))           # one incoming edge each: weight 1
        True
    """

    #: set by a model that replaces its input's self-loops (``NodeClassifier(self_loops=True)``):
    #: explainer masks then map onto a loop run that skips global-token nodes
    explain_loops_replaced: bool = False
    #: the model's input edge_index while it runs with message hooks and its loops replaced
    #: (NodeClassifier(self_loops=True)): the hooks then get alpha per input edge
    hook_input_edges: Optional[Tensor] = None
    #: with ``weights_grad`` and dropout, return alpha after dropout (GATConv) or before (TransformerConv)
    returns_dropped_weights: bool = True

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int, heads: int = 1,
                 concat: bool = True, dropout: float = 0.0, edge_dim: Optional[int] = None,
                 bias: bool = True, score: Union[str, EdgeScore] = "dot", root_weight: bool = True,
                 negative_slope: float = 0.2, impl: str = "auto", normalization: str = "softmax", *,
                 add_self_loops: bool = False, fill_value: Union[float, Tensor, str] = "mean",
                 share_weights: bool = False, beta: bool = False, residual: bool = False,
                 out_bias: bool = False, weights_grad: bool = False):
        # A MessagePassing subclass so that PyG treats it as a conv: to_hetero() turns it into
        # one copy per edge type, HeteroConv and summary() see a conv. It never calls
        # propagate(): the attention kernels replace message/aggregate.
        super().__init__(aggr=None, node_dim=0)
        #: the score object (:class:`~graphattn.nn.attention.score.EdgeScore`): projections and score math
        self.score_fn = SCORES.make(score)
        check_options(self.score_fn, impl, normalization, share_weights, beta, root_weight, residual,
                            weights_grad)
        f_src, f_dst = channel_pair(in_channels)
        if share_weights and f_src != f_dst:
            raise ValueError(f"share_weights=True applies one projection to sources and targets: it needs one "
                             f"input width, got in_channels={in_channels!r}")
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
        check_fill_value(fill_value)
        self.in_channels = tuple(in_channels) if isinstance(in_channels, (tuple, list)) else in_channels
        self.out_channels, self.heads = out_channels, heads
        self.concat, self.dropout, self.edge_dim, self.score = concat, dropout, edge_dim, self.score_fn.name
        self.root_weight, self.negative_slope, self.impl = root_weight, negative_slope, impl
        self.normalization = normalization
        self.add_self_loops, self.fill_value, self.share_weights = add_self_loops, fill_value, share_weights
        self.beta, self.residual, self.out_bias, self.weights_grad = beta, residual, out_bias, weights_grad
        self.setup(f_src, f_dst, bias)
        self.reset_parameters()

    def setup(self, f_src: int, f_dst: int, bias: bool) -> None:
        """Create the parameters: the score's projections (:meth:`EdgeScore.setup
        <graphattn.nn.attention.score.EdgeScore.setup>`), then the root term (``lin_skip`` with
        ``root_weight``, ``res`` with ``residual``), ``lin_beta`` and the output ``bias``. The PyG
        faces of :mod:`graphattn.nn.conv` override it to build PyG's modules in PyG's order."""
        width = self.heads * self.out_channels if self.concat else self.out_channels
        empty_modules(self)
        self.score_fn.setup(self, f_src, f_dst, bias)
        if self.root_weight:
            self.lin_skip = make_linear(f_dst, width, bias)
        if self.residual:
            self.res = glorot_linear(f_dst, width, False)
        if self.beta:
            self.lin_beta = nn.Linear(3 * width, 1, bias=False)
        if self.out_bias:
            self.bias = nn.Parameter(torch.empty(width))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # either projection layout of a state dict (fused lin_qkv or PyG's per-role modules) loads
        self.score_fn.convert_state_dict(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _weight_dtype(self) -> Optional[torch.dtype]:
        """dtype of the layer's weights (None while lazy ``-1`` widths are uninitialised)."""
        for lin in (self.lin_qkv, self.lin_query, self.lin_key, self.lin_r, self.lin_l, self.lin, self.lin_src):
            if lin is not None and not isinstance(lin.weight, torch.nn.parameter.UninitializedParameter):
                return lin.weight.dtype
        return None

    def reset_parameters(self) -> None:
        """Initial values, in the score's order (:meth:`EdgeScore.reset_parameters
        <graphattn.nn.attention.score.EdgeScore.reset_parameters>`), and a zero output ``bias``."""
        self.score_fn.reset_parameters(self)
        zeros(self.bias)

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                edge_attr: Optional[Tensor] = None, return_attention_weights: bool = False, *,
                attn_bias: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                edge_attr_index: Optional[Tensor] = None, size: Optional[Tuple[int, int]] = None,
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        """Args: ``x`` (N, F), or a pair ``(x_src, x_dst)`` for a bipartite graph (as in PyG:
        ``edge_index[0]`` indexes ``x_src``, ``edge_index[1]`` indexes ``x_dst``; keys and
        values come from sources, queries and the root term from targets; the output has one
        row per target), ``edge_index`` (2, E), or PyG's transposed sparse adjacency ``adj_t``
        ``(N, N_src)`` as a torch.sparse COO/CSR/CSC tensor (entry ``[i, j]`` for an edge j -> i;
        values ignored; per-edge inputs and the returned ``alpha`` follow its storage order, and
        ``(adj_t, alpha)`` is returned as PyG's TransformerConv does; an uncoalesced COO ``adj_t``
        comes back coalesced, the order ``alpha`` is in, and is refused with per-edge inputs),
        ``edge_attr`` (E, D) when ``edge_dim`` is set, ``attn_bias`` optional (E, H) additive
        score bias (e.g. a structural bias), ``batch`` optional (N,) graph ids: lets batches of
        complete graphs use SDPA (not with a bipartite ``x``; complete graphs over consecutive
        node ranges are also found from ``edge_index`` alone), ``edge_attr_index`` optional (E,)
        integer: ``edge_attr`` is then a ``(U, D)`` table of distinct rows (e.g. bond types)
        and edge e uses row ``edge_attr_index[e]``; the edge projection runs on the U rows, not
        on E (same result as ``edge_attr[edge_attr_index]``), ``size`` optional ``(N_src,
        N_dst)`` as PyG's ``propagate`` takes it (the target count of ``x=(x_src, None)``; with
        ``add_self_loops`` the loops cover ``min(size)`` nodes).

        ``x`` and ``edge_attr`` must be finite and ``attn_bias`` free of NaN and +inf
        (``-inf`` hides an edge), else ``ValueError``: NaN would silently zero (fused kernel)
        or poison (chunked path) the whole target row. That scan runs on CPU tensors; on CUDA
        it would make every call wait for the GPU, so it runs there only under
        ``torch.autograd.set_detect_anomaly(True)`` (see ``docs/reliability.md``). With
        ``return_attention_weights`` the returned ``alpha`` ``(E, H)`` is detached unless the
        layer has ``weights_grad``."""
        refuse_tracing()
        if self.explain and self.normalization != "softmax":
            raise NotImplementedError(f"PyG Explainer edge masks need normalization='softmax', the layer has "
                                      f"{self.normalization!r} (the masks stay set after a failed "
                                      "explanation: torch_geometric.explain.algorithm.utils.clear_masks(model))")
        x_src, x_dst, bipartite = split_input(x, allow_missing_dst=not self.score_fn.needs_targets)
        N_src, N = node_counts(x_src, x_dst, edge_index, size)
        wdtype = self._weight_dtype()
        check_nodes(x_src, x_dst, bipartite, batch, self.in_channels, wdtype)
        edge_index, edge_attr, adj = attention_graph(edge_index, edge_attr, attn_bias, edge_attr_index, N_src, N, size,
                                                     self.add_self_loops, self.fill_value)
        H = self.heads
        # cached per edge_index tensor (range-checked on build); a bipartite graph is laid out
        # as one node set [targets; sources], see to_csr
        csr = to_csr(edge_index, N, num_src=N_src if bipartite else None)
        E = edge_index.size(1)
        if attn_bias is not None:
            check_tensor_shape(attn_bias, (E, H), "attn_bias")
            check_bias_dtype(attn_bias)
        # (E, H, C), or (E, H) for a score term (gat)
        edge_feat = self.score_fn.edge_features_per_edge(self, edge_attr, edge_attr_index, E, wdtype)
        parts = self.score_fn.project(self, x_src, x_dst)
        check_values(x_src, x_dst, bipartite, parts, edge_attr if self.lin_edge is not None else None, attn_bias)
        # PyG's message hooks (AttentionExplainer reads msg_kwargs["alpha"]) get the weights
        want_alpha = bool(return_attention_weights) or bool(self._message_forward_hooks)
        if self.explain:  # a PyG Explainer's edge mask is set (torch_geometric.explain)
            ei = plain_tensor(edge_index).long()
            out, alpha = self.score_fn.explain(self, parts, ei, edge_feat, attn_bias, N, self.explainer_mask(ei, N))
        else:
            out, alpha = self.score_fn.attend(self, parts, csr, edge_index, edge_feat, attn_bias, batch, want_alpha,
                                              N_src if bipartite else None)
        return self._finish(out, alpha, parts.root, edge_index if adj is None else adj,
                            bool(return_attention_weights))

    def has_explainer_mask(self) -> bool:
        """Whether a PyG ``Explainer`` has set an edge mask on this layer (PyG's ``set_masks``)."""
        return self._edge_mask is not None

    def has_message_hooks(self) -> bool:
        """Whether PyG message forward hooks are registered (PyG's ``AttentionExplainer`` registers one)."""
        return bool(self._message_forward_hooks)

    def explainer_mask(self, edge_index: Tensor, num_targets: int, loops_replaced: Optional[bool] = None) -> Tensor:
        """The edge mask of a PyG ``Explainer`` (set on this layer by PyG's ``set_masks``) as one
        weight per edge of ``edge_index`` ``(2, E)``, the graph this layer attends over
        (:func:`~graphattn.nn.attention.explain.layer_edge_mask`; ``loops_replaced`` default
        :attr:`explain_loops_replaced`)."""
        replaced = self.explain_loops_replaced if loops_replaced is None else loops_replaced
        return layer_edge_mask(self._edge_mask, self._loop_mask, self._apply_sigmoid, edge_index, num_targets,
                               loops_replaced=replaced)

    def _finish(self, out: Tensor, alpha: Optional[Tensor], root: Optional[Tensor], edge_index: Tensor,
                return_attention_weights: bool):
        """Heads concatenated or averaged, plus the root term (gated with ``beta``) and the
        output bias; the PyG return contract. PyG's message forward hooks are called with
        ``({"alpha": alpha},)`` (``(E, H)``; no per-edge messages exist, so their output
        argument is None; inside ``NodeClassifier(self_loops=True)`` PyG's explainers' hooks get
        ``alpha`` per edge of the model's input, its self-loops reading the loops that replaced
        them; other hooks get the layer's own edge order)."""
        if self._message_forward_hooks:
            hook_alpha = alpha
            if alpha is not None and self.hook_input_edges is not None:
                hook_alpha = input_edge_alpha(alpha, self.hook_input_edges)
            for hook in self._message_forward_hooks.values():  # only PyG's explainers read input-edge order
                pyg = getattr(hook, "__module__", "").startswith("torch_geometric.explain")
                hook(self, ({"alpha": hook_alpha if pyg else alpha},), None)
        N, H, C = out.shape
        out = out.reshape(N, H * C) if self.concat else out.mean(dim=1)  # (N, H*C) | (N, C)
        if root is not None:
            if self.lin_beta is not None:
                gate = self.lin_beta(torch.cat([out, root, out - root], dim=-1)).sigmoid()  # (N, 1)
                out = gate * root + (1 - gate) * out
            else:
                out = out + root
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, (edge_index, alpha)
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
