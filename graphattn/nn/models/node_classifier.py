"""NodeClassifier: GraphTransformer + per-node head, with APPNP/GPR propagation and a GCN branch."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from graphattn.nn.attention import GraphSelfAttention
from graphattn.nn.features import gcn_normalized_graph
from graphattn.nn.models.graph_transformer import GraphTransformer
from graphattn.ops.csr import as_edge_index
from graphattn.utils.validation import check_edge_index, check_int, check_model_input

__all__ = ["NodeClassifier"]


class NodeClassifier(nn.Module):
    r"""Node classification: :class:`GraphTransformer` + a linear head per node, optionally
    followed by personalised-PageRank propagation of the logits (APPNP, Gasteiger et al. 2019)::

        z⁰ = Head(GraphTransformer(x));   zᵏ⁺¹ = (1 - a) Â zᵏ + a z⁰,   Â = D^-½ (A + I) D^-½

    Propagation spreads each node's prediction over its ``propagation``-hop neighbourhood
    with weights decaying as ``(1 - a)ᵏ`` and no extra parameters: on homophilous graphs
    (citation, page-page, country networks) it lets the few labelled nodes inform their
    neighbourhoods far beyond the attention layers' receptive field. With
    ``propagation_learned`` the K steps become ``z = Σₖ γₖ Âᵏ z⁰`` with K + 1 learned hop
    weights γ (GPR-GNN, Chien et al. 2021), initialised to the PPR weights
    ``γₖ = a (1 - a)ᵏ``, ``γ_K = (1 - a)ᴷ`` (so it starts as exactly the APPNP output) and
    free to move towards local, global or sign-alternating (heterophilous) filters.
    With ``gcn_weight = w > 0`` a one-layer GCN branch runs next to the transformer and the
    head reads ``h = (1 - w) GraphTransformer(x) + w ReLU(Â x W_g)`` (SGFormer, Wu et al.
    2023: attention plus a GCN-normalised branch, w = 0.8 there); with ``gcn_layers = L > 1``
    the branch stacks L such layers, ``ReLU(Â Dropout(g) W)``.
    ``propagation_dropout = p`` drops each entry of Â (self-loops included) with probability p
    at every propagation step in training and rescales the rest by ``1 / (1 - p)`` (APPNP's
    dropout on the adjacency; DropEdge, Rong et al. 2020); evaluation uses the full Â.

    Args:
        in_channels (int), hidden_channels (int), num_classes (int), num_layers (int, default 2),
        heads (int, default 4), num_global_tokens (int, default 0), pe_dim (int, default 0),
        edge_dim (int, optional), dropout (float, default 0.0): see :class:`GraphTransformer`
        (``dropout`` also before the head).
        self_loops (bool, default False): every node also attends to itself (existing self-loops
            are replaced by one per node), as in GAT.
        propagation (int, default 0): K steps of the propagation above (0 = none).
        propagation_alpha (float, default 0.1): teleport probability ``a`` in (0, 1].
        propagation_learned (bool, default False): learn the hop weights γ (needs
            ``propagation >= 1``); their state-dict entry is ``hop_weights`` ``(K + 1,)``.
        gcn_weight (float, default 0.0): weight ``w`` in [0, 1) of the GCN branch (0 = none);
            its weights are ``gcn.weight`` ``(hidden_channels, in_channels)`` and ``gcn.bias``.
        gcn_layers (int, default 1): GCN layers of that branch (needs ``gcn_weight > 0`` when
            > 1); layer ``i >= 2`` is ``gcn_stack.{i-2}`` ``(hidden_channels, hidden_channels)``.
        propagation_dropout (float, default 0.0): edge dropout ``p`` in [0, 1) on Â during
            training propagation (needs ``propagation >= 1`` when > 0).
        **backbone_kwargs: further :class:`GraphTransformer` options (``attn_dropout``,
            ``norm``, ``global_attn``, ``pe_kind``, ...).

    Shapes: x ``(N, F)``, edge_index ``(2, E)`` -> logits ``(N, num_classes)``.

    Example::

        >>> import torch
        >>> from graphattn import NodeClassifier
        >>> x, edge_index = torch.randn(5, 8), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
        >>> model = NodeClassifier(8, 16, num_classes=3, num_layers=2, heads=2).eval()
        >>> model(x, edge_index).shape
        torch.Size([5, 3])
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_classes: int, num_layers: int = 2,
                 heads: int = 4, num_global_tokens: int = 0, pe_dim: int = 0,
                 edge_dim: Optional[int] = None, dropout: float = 0.0, self_loops: bool = False,
                 propagation: int = 0, propagation_alpha: float = 0.1, propagation_learned: bool = False,
                 gcn_weight: float = 0.0, gcn_layers: int = 1, propagation_dropout: float = 0.0,
                 **backbone_kwargs):
        super().__init__()
        if not isinstance(propagation, int) or isinstance(propagation, bool) or propagation < 0:
            raise ValueError(f"propagation must be an int >= 0, got {propagation!r}")
        check_int("num_classes", num_classes, 1)
        if not 0.0 < propagation_alpha <= 1.0:
            raise ValueError(f"propagation_alpha must be in (0, 1], got {propagation_alpha}")
        if self_loops and edge_dim is not None:
            raise ValueError("self_loops=True is not supported with edge_dim (self-loops have no edge features)")
        if propagation_learned and propagation == 0:
            raise ValueError("propagation_learned=True needs propagation >= 1 (the number of hops K)")
        if not 0.0 <= gcn_weight < 1.0:
            raise ValueError(f"gcn_weight must be in [0, 1), got {gcn_weight}")
        if gcn_weight > 0 and backbone_kwargs.get("node_vocab_sizes") is not None:
            raise ValueError("gcn_weight > 0 needs float features (the GCN branch is linear in x)")
        if not isinstance(gcn_layers, int) or gcn_layers < 1:
            raise ValueError(f"gcn_layers must be an int >= 1, got {gcn_layers!r}")
        if gcn_layers > 1 and gcn_weight == 0:
            raise ValueError("gcn_layers > 1 needs gcn_weight > 0 (there is no GCN branch otherwise)")
        if not 0.0 <= propagation_dropout < 1.0:
            raise ValueError(f"propagation_dropout must be in [0, 1), got {propagation_dropout}")
        if propagation_dropout > 0 and propagation == 0:
            raise ValueError("propagation_dropout > 0 needs propagation >= 1 (there is nothing to drop otherwise)")
        self.num_classes = num_classes
        self.self_loops, self.propagation, self.propagation_alpha = bool(self_loops), propagation, propagation_alpha
        self.backbone = GraphTransformer(in_channels, hidden_channels, num_layers, heads, num_global_tokens,
                                         pe_dim, edge_dim=edge_dim, dropout=dropout, **backbone_kwargs)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden_channels, num_classes))
        if self.self_loops:  # the attention layers see the input's loops replaced by ours: explainer masks map so
            for m in self.backbone.modules():
                if isinstance(m, GraphSelfAttention):
                    m.explain_loops_replaced = True
        self.propagation_learned = bool(propagation_learned)
        self.hop_weights = nn.Parameter(torch.empty(propagation + 1)) if propagation_learned else None  # (K + 1,)
        self.reset_hop_weights()
        self.gcn_weight = float(gcn_weight)
        self.gcn = nn.Linear(in_channels, hidden_channels) if gcn_weight > 0 else None
        self.gcn_stack = nn.ModuleList(nn.Linear(hidden_channels, hidden_channels) for _ in range(gcn_layers - 1))
        self.gcn_dropout, self.propagation_dropout = nn.Dropout(dropout), float(propagation_dropout)
        self._graph_cache: Optional[tuple] = None  # (edge_index, key, edges with loops, Â weights)

    def __getstate__(self):
        # pickling / torch.save(model) / deepcopy leave the graph cache behind: it holds the
        # user's edge_index and the looped graph (38 MB for 1M edges), and a copy never hits it
        state = super().__getstate__()
        state["_graph_cache"] = None
        return state

    def reset_parameters(self) -> None:
        """Re-initialise every trained weight: backbone, head, GCN branch, hop weights."""
        self.backbone.reset_parameters()
        self.head[1].reset_parameters()
        for lin in ([self.gcn] if self.gcn is not None else []) + list(self.gcn_stack):
            lin.reset_parameters()
        self.reset_hop_weights()

    def reset_hop_weights(self) -> None:
        """Learned hop weights back to the PPR weights of ``propagation_alpha``."""
        if self.hop_weights is not None:
            a, K = self.propagation_alpha, self.propagation
            with torch.no_grad():
                self.hop_weights.copy_(a * (1 - a) ** torch.arange(K + 1, dtype=torch.float64))
                self.hop_weights[K] = (1 - a) ** K

    def _graph(self, edge_index: Tensor, N: int, dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
        """``edge_index`` with one self-loop per node ``(2, E' + N)`` and its GCN weights
        ``(E' + N,)``; cached per edge_index tensor (the CSR of the attention is too), keyed
        like the CSR cache on identity, data pointer, in-place version counter, shape and N,
        so an in-place edit of ``edge_index`` rebuilds it. Inference-mode tensors have no
        version counter and are never cached, nor is anything under inference mode or torch.compile."""
        # not cached: inference tensors (no version counter), anything built under
        # inference_mode (it could not be saved for a later backward), and under torch.compile
        if torch.compiler.is_compiling() or edge_index.is_inference() or torch.is_inference_mode_enabled():
            return gcn_normalized_graph(edge_index, N, dtype)
        key = (edge_index.data_ptr(), edge_index._version, tuple(edge_index.shape), int(N), dtype)
        c = self._graph_cache
        if c is not None and c[0] is edge_index and c[1] == key:
            return c[2], c[3]
        ei, w = gcn_normalized_graph(edge_index, N, dtype)
        self._graph_cache = (edge_index, key, ei, w)
        return ei, w

    def _smooth(self, z: Tensor, edge_index: Tensor, edge_dropout: float = 0.0,
                graph: Optional[Tuple[Tensor, Tensor]] = None) -> Tensor:
        """``Â z`` for ``z`` ``(N, K)``: one GCN-normalised aggregation over the cached graph
        (in training, each entry of Â dropped with probability ``edge_dropout``); ``graph``: the
        looped graph and weights of :meth:`_graph` when the caller has them."""
        if graph is None:
            graph = self._graph(edge_index, z.size(0), torch.float64 if z.dtype == torch.float64 else torch.float32)
        ei, w = graph
        w = w.to(z.dtype)
        mask = self._explainer_mask(ei, z.size(0))
        if mask is not None:  # a PyG Explainer's edge mask reaches the GCN branch and propagation too
            w = w * mask.to(w.dtype)
        if edge_dropout > 0 and self.training:
            w = nn.functional.dropout(w, edge_dropout, True)  # (E' + N,), kept ones scaled by 1/(1-p)
        # index_select, not z[ei[0]]: advanced indexing backpropagates with index_put_(accumulate=True),
        # which is not deterministic on CPU with several threads (same seed, other weights)
        return torch.zeros_like(z).index_add_(0, ei[1], z.index_select(0, ei[0]) * w[:, None])

    def _explainer_mask(self, ei: Tensor, N: int) -> Optional[Tensor]:
        """The edge mask a PyG ``Explainer`` set on the attention layers, mapped onto ``ei``
        (None when no explanation runs)."""
        for m in self.backbone.modules():
            if isinstance(m, GraphSelfAttention) and m.explain and m.has_explainer_mask():
                return m.explainer_mask(ei, N, loops_replaced=True)
        return None

    def propagate(self, z: Tensor, edge_index: Tensor, graph: Optional[Tuple[Tensor, Tensor]] = None) -> Tensor:
        """``propagation`` APPNP steps of ``z`` ``(N, K)`` over the graph (identity when 0);
        ``graph``: the looped graph and weights of :meth:`_graph` when the caller has them."""
        if self.propagation == 0:
            return z
        a, z0, p = self.propagation_alpha, z, self.propagation_dropout
        if self.hop_weights is not None:  # GPR: Σₖ γₖ Âᵏ z⁰
            out = self.hop_weights[0] * z
            for k in range(1, self.propagation + 1):
                z = self._smooth(z, edge_index, p, graph)  # Âᵏ z⁰, (N, K)
                out = out + self.hop_weights[k] * z
            return out
        for _ in range(self.propagation):
            z = (1 - a) * self._smooth(z, edge_index, p, graph) + a * z0
        return z

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, pe: Optional[Tensor] = None, **pe_kwargs) -> Tensor:
        """``pe_kwargs``: ``pe_eigvals`` and ``pe_mask``, see :meth:`GraphTransformer.forward`."""
        check_model_input(x)
        edge_index, _ = as_edge_index(edge_index, x.size(0), per_edge=(edge_attr,))  # PyG's sparse adj_t too
        if self.self_loops:  # the backbone checks what it gets; the loops are built from the input first
            check_edge_index(edge_index, x.size(0))
        gdt = torch.float64 if x.dtype == torch.float64 else torch.float32  # as _smooth asks: one cache entry
        # the looped graph and its weights, once per call (eager: cached; traced: its size depends
        # on the data, and one build shared by every use keeps one size symbol in the graph)
        needs_graph = self.self_loops or self.gcn is not None or self.propagation > 0
        graph = self._graph(edge_index, x.size(0), gdt) if needs_graph else None
        attn_edges = graph[0] if self.self_loops else edge_index
        # PyG's message hooks (AttentionExplainer) read alpha per input edge: with the input's
        # loops replaced, the layers map theirs back onto edge_index while hooks are registered
        hooked = [m for m in self.backbone.modules() if isinstance(m, GraphSelfAttention)
                  and m.has_message_hooks()] if self.self_loops else []
        for m in hooked:
            m.hook_input_edges = edge_index
        try:
            h, _ = self.backbone(x, attn_edges, edge_attr, batch, pe, **pe_kwargs)
        finally:
            for m in hooked:
                m.hook_input_edges = None
        if self.gcn is not None:  # GCN branch: ReLU(Â x W_g), (N, C), then gcn_layers - 1 more
            g = torch.relu(self._smooth(self.gcn(x), edge_index, graph=graph))
            for lin in self.gcn_stack:
                g = torch.relu(self._smooth(lin(self.gcn_dropout(g)), edge_index, graph=graph))
            h = (1 - self.gcn_weight) * h + self.gcn_weight * g
        return self.propagate(self.head(h), edge_index, graph=graph)
