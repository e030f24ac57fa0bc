"""GraphTransformer backbone and the node / graph classification models built on it."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

from .block import GraphTransformerBlock, make_norm
from .dropout import Dropout
from .global_tokens import GlobalTokens
from .model_parts import (FeatureEncoder, GraphFeatureNorm, _raise_non_finite_pe, gcn_normalized_graph,
                          graph_feature_input)
from .padding import check_batch
from .validation import check_edge_index

__all__ = ["FeatureEncoder", "GraphFeatureNorm", "GraphTransformer", "NodeClassifier", "GraphClassifier",
           "ProbabilityEnsemble", "READOUTS", "PE_KINDS"]

READOUTS = ("mean", "sum", "max", "token")
PE_KINDS = ("laplacian", "linear")


class GraphTransformer(nn.Module):
    r"""Backbone: input encoders, optional PE and global tokens, ``num_layers`` blocks.

    ``h⁰ = Enc(x) + PE(pe)``; ``hˡ = Blockˡ(hˡ⁻¹)`` on the graph (plus G global tokens per
    graph when ``num_global_tokens > 0``); a final norm. Without tokens a node's state after
    L layers depends on its L-hop in-neighbourhood only; with tokens, after 2 layers on its
    whole graph.

    Args:
        in_channels (int): node feature columns F.
        hidden_channels (int): C.
        num_layers (int): number of :class:`GraphTransformerBlock`.
        heads (int, default 4), dropout (float, default 0.0), norm ("layer"|"batch"|"none"),
        score ("dot"|"additive"), normalization ("softmax"|"relu"|"sigmoid"), global_attn
        (None|"linear"|"reduced"|"clustered"|"synthesizer"), global_attn_kwargs and local_mpnn
        (None|"gine"|"gin", a GraphGPS-style message-passing branch on the graph's own edges):
        passed to every block, see :class:`GraphTransformerBlock`.
        num_global_tokens (int, default 0): G learnable global tokens per graph.
        pe_dim (int, default 0): K, size of the positional encoding passed as ``pe``.
        pe_kind (str, default "laplacian"): ``"laplacian"`` (random eigenvector sign flips in
            training, :class:`~graphattn.encodings.LapPEEncoder`) or ``"linear"`` (e.g. RWSE).
        edge_dim (int, optional): edge feature columns D.
        node_vocab_sizes / edge_vocab_sizes (optional): categorical inputs, see FeatureEncoder.

    Shapes:
        x ``(N, F)``, edge_index ``(2, E)``, edge_attr ``(E, D)``, batch ``(N,)``, pe ``(N, K)``
        -> node states ``(N, C)`` and token states ``(B, G, C)`` (or None).
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, heads: int = 4,
                 num_global_tokens: int = 0, pe_dim: int = 0, pe_kind: str = "laplacian",
                 edge_dim: Optional[int] = None, dropout: float = 0.0, attn_dropout: float = 0.0,
                 norm: str = "layer", score: str = "dot", normalization: str = "softmax",
                 global_attn: Optional[str] = None, global_attn_kwargs: Optional[dict] = None,
                 node_vocab_sizes: Optional[Sequence[int]] = None,
                 edge_vocab_sizes: Optional[Sequence[int]] = None, local_mpnn: Optional[str] = None):
        super().__init__()
        if pe_kind not in PE_KINDS:
            raise ValueError(f"pe_kind must be one of {PE_KINDS}, got {pe_kind!r}")
        self.in_channels, self.hidden_channels, self.num_layers = in_channels, hidden_channels, num_layers
        self.num_global_tokens, self.pe_dim, self.edge_dim = num_global_tokens, pe_dim, edge_dim
        self.node_encoder = FeatureEncoder(in_channels, hidden_channels, node_vocab_sizes)
        self.edge_encoder = (FeatureEncoder(edge_dim, hidden_channels, edge_vocab_sizes, name="edge_attr")
                             if edge_dim is not None else None)
        inner_edge_dim = hidden_channels if edge_dim is not None else None
        if pe_dim > 0 and pe_kind == "laplacian":
            from .encodings import LapPEEncoder

            self.pe_encoder = LapPEEncoder(pe_dim, hidden_channels)
        elif pe_dim > 0:
            self.pe_encoder = nn.Linear(pe_dim, hidden_channels)
        else:
            self.pe_encoder = None
        self.pe_kind = pe_kind
        self.tokens = (GlobalTokens(hidden_channels, num_global_tokens, edge_dim=inner_edge_dim)
                       if num_global_tokens > 0 else None)
        self.blocks = nn.ModuleList(
            GraphTransformerBlock(hidden_channels, heads, dropout, attn_dropout, inner_edge_dim, norm,
                                  score=score, normalization=normalization, global_attn=global_attn,
                                  global_attn_kwargs=global_attn_kwargs, local_mpnn=local_mpnn)
            for _ in range(num_layers))
        self.norm_out = make_norm(norm, hidden_channels)

    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, pe: Optional[Tensor] = None,
                num_graphs: Optional[int] = None, *, pe_eigvals: Optional[Tensor] = None,
                pe_mask: Optional[Tensor] = None, check_range: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
        """``pe_eigvals`` / ``pe_mask`` ``(N, K)``: eigenvalues and padding mask stored by
        :class:`~graphattn.encodings.AddLaplacianPE` (``data.lap_eigval``, ``data.lap_pe_mask``).

        ``edge_index`` is range-checked here, once per tensor (remembered, so the layers' CSR
        build and the global tokens do not scan it again). ``batch`` is shape-checked here and
        its ids range-checked where they index (global tokens, layouts) unless
        ``check_range=False``: the caller already checked them against ``num_graphs`` (as
        :class:`GraphClassifier` does), so no component repeats that per-batch sync."""
        check_edge_index(edge_index, x.size(0))
        if batch is not None:
            check_batch(batch, x.size(0), num_graphs, check_range=False)
        h = self.node_encoder(x)
        if self.pe_encoder is not None:
            if pe is None:
                raise ValueError(f"pe of shape (N, {self.pe_dim}) is required: the model was built with pe_dim={self.pe_dim}")
            if pe.shape != (x.size(0), self.pe_dim):
                raise ValueError(f"pe must have shape ({x.size(0)}, {self.pe_dim}), got {tuple(pe.shape)}")
            if self.pe_kind == "laplacian":
                hp = self.pe_encoder(pe, eigvals=pe_eigvals, mask=pe_mask, batch=batch, num_graphs=num_graphs)
            else:
                hp = self.pe_encoder(pe)
            if hp.numel() and not bool(torch.isfinite(hp).all()):
                _raise_non_finite_pe(pe, pe_eigvals, pe_mask)
            h = h + hp
        edge_attr_index = None
        if self.edge_encoder is not None:
            if edge_attr is None:
                raise ValueError(f"edge_attr is required: the model was built with edge_dim={self.edge_dim}")
            if self.edge_encoder.vocab_sizes is not None:
                # Categorical edges: encode each distinct row once; every layer then projects
                # U rows (not E) and gathers them per edge (same values, ~25 % fewer FLOPs on
                # molecules, where the per-edge projection was a quarter of each layer's GEMMs).
                codes, edge_attr_index = self.edge_encoder.unique_rows(edge_attr)
                edge_attr = self.edge_encoder(codes)  # (U, C)
            else:
                edge_attr = self.edge_encoder(edge_attr)  # (E, C)
        elif edge_attr is not None:
            edge_attr = None  # the model does not use edge features (build it with edge_dim=D)
        N, E = h.size(0), edge_index.size(1)
        if self.tokens is not None:
            tg = self.tokens(h, edge_index, batch, edge_attr, num_graphs, edge_attr_index=edge_attr_index,
                             check_range=check_range)
            h, edge_index, edge_attr, batch = tg.x, tg.edge_index, tg.edge_attr, tg.batch
            edge_attr_index = tg.edge_attr_index
        extra = {} if edge_attr_index is None else {"edge_attr_index": edge_attr_index}
        if self.tokens is not None and self.blocks and self.blocks[0].local is not None:
            extra["local_edges"] = E  # message passing on the molecule's bonds, not token edges
        for block in self.blocks:
            h = block(h, edge_index, edge_attr, batch, **extra)
        h = self.norm_out(h)
        if self.tokens is not None:
            return self.tokens.split(h, N)
        return h, None


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
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_classes: int, num_layers: int = 2,
                 heads: int = 4, num_global_tokens: int = 0, pe_dim: int = 0,
                 edge_dim: Optional[int] = None, dropout: float = 0.0, self_loops: bool = False,
                 propagation: int = 0, propagation_alpha: float = 0.1, propagation_learned: bool = False,
                 gcn_weight: float = 0.0, gcn_layers: int = 1, propagation_dropout: float = 0.0,
                 **backbone_kwargs):
        super().__init__()
        if not isinstance(propagation, int) or propagation < 0:
            raise ValueError(f"propagation must be an int >= 0, got {propagation!r}")
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
        self.propagation_learned = bool(propagation_learned)
        self.hop_weights = nn.Parameter(torch.empty(propagation + 1)) if propagation_learned else None  # (K + 1,)
        self.reset_hop_weights()
        self.gcn_weight = float(gcn_weight)
        self.gcn = nn.Linear(in_channels, hidden_channels) if gcn_weight > 0 else None
        self.gcn_stack = nn.ModuleList(nn.Linear(hidden_channels, hidden_channels) for _ in range(gcn_layers - 1))
        self.gcn_dropout, self.propagation_dropout = nn.Dropout(dropout), float(propagation_dropout)
        self._graph_cache: Optional[tuple] = None  # (edge_index, key, edges with loops, Â weights)

    def reset_hop_weights(self) -> None:
        """Learned hop weights back to the PPR weights of ``propagation_alpha``."""
        if self.hop_weights is not None:
            a, K = self.propagation_alpha, self.propagation
            with torch.no_grad():
                self.hop_weights.copy_(a * (1 - a) ** torch.arange(K + 1, dtype=torch.float64))
                self.hop_weights[K] = (1 - a) ** K

    def _graph(self, edge_index: Tensor, N: int) -> Tuple[Tensor, Tensor]:
        """``edge_index`` with one self-loop per node ``(2, E' + N)`` and its GCN weights
        ``(E' + N,)``; cached per edge_index tensor (the CSR of the attention is too), keyed
        like the CSR cache on identity, data pointer, in-place version counter, shape and N,
        so an in-place edit of ``edge_index`` rebuilds it. Inference-mode tensors have no
        version counter and are never cached."""
        if edge_index.is_inference():
            return gcn_normalized_graph(edge_index, N)
        key = (edge_index.data_ptr(), edge_index._version, tuple(edge_index.shape), int(N))
        c = self._graph_cache
        if c is not None and c[0] is edge_index and c[1] == key:
            return c[2], c[3]
        ei, w = gcn_normalized_graph(edge_index, N)
        self._graph_cache = (edge_index, key, ei, w)
        return ei, w

    def _smooth(self, z: Tensor, edge_index: Tensor, edge_dropout: float = 0.0) -> Tensor:
        """``Â z`` for ``z`` ``(N, K)``: one GCN-normalised aggregation over the cached graph
        (in training, each entry of Â dropped with probability ``edge_dropout``)."""
        ei, w = self._graph(edge_index, z.size(0))
        w = w.to(z.dtype)
        if edge_dropout > 0 and self.training:
            w = nn.functional.dropout(w, edge_dropout, True)  # (E' + N,), kept ones scaled by 1/(1-p)
        return torch.zeros_like(z).index_add_(0, ei[1], z[ei[0]] * w[:, None])

    def propagate(self, z: Tensor, edge_index: Tensor) -> Tensor:
        """``propagation`` APPNP steps of ``z`` ``(N, K)`` over the graph (identity when 0)."""
        if self.propagation == 0:
            return z
        a, z0, p = self.propagation_alpha, z, self.propagation_dropout
        if self.hop_weights is not None:  # GPR: Σₖ γₖ Âᵏ z⁰
            out = self.hop_weights[0] * z
            for k in range(1, self.propagation + 1):
                z = self._smooth(z, edge_index, p)  # Âᵏ z⁰, (N, K)
                out = out + self.hop_weights[k] * z
            return out
        for _ in range(self.propagation):
            z = (1 - a) * self._smooth(z, edge_index, p) + a * z0
        return z

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, pe: Optional[Tensor] = None, **pe_kwargs) -> Tensor:
        """``pe_kwargs``: ``pe_eigvals`` and ``pe_mask``, see :meth:`GraphTransformer.forward`."""
        attn_edges = self._graph(edge_index, x.size(0))[0] if self.self_loops else edge_index
        h, _ = self.backbone(x, attn_edges, edge_attr, batch, pe, **pe_kwargs)
        if self.gcn is not None:  # GCN branch: ReLU(Â x W_g), (N, C), then gcn_layers - 1 more
            g = torch.relu(self._smooth(self.gcn(x), edge_index))
            for lin in self.gcn_stack:
                g = torch.relu(self._smooth(lin(self.gcn_dropout(g)), edge_index))
            h = (1 - self.gcn_weight) * h + self.gcn_weight * g
        return self.propagate(self.head(h), edge_index)


class GraphClassifier(nn.Module):
    """Graph classification / multi-task property prediction: backbone + readout + MLP head.

    ``readout``: ``"mean"``, ``"sum"``, ``"max"`` over nodes, or ``"token"`` (mean state of
    the graph's global tokens; needs ``num_global_tokens >= 1``).
    ``graph_feature_dim = D > 0``: the forward takes ``graph_features`` ``(B, D)`` (e.g. RDKit
    descriptors, :mod:`graphattn.data.descriptors`), standardised by :class:`GraphFeatureNorm`
    (call ``model.graph_feature_norm.fit(train_features)`` before training) and concatenated
    to the pooled vector before the head, as chemprop does.

    Shapes: x ``(N, F)``, edge_index ``(2, E)``, batch ``(N,)``, graph_features ``(B, D)`` ->
    logits ``(B, num_tasks)``.
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_tasks: int, num_layers: int = 4,
                 heads: int = 4, num_global_tokens: int = 0, pe_dim: int = 0,
                 edge_dim: Optional[int] = None, dropout: float = 0.0, readout: str = "mean",
                 graph_feature_dim: int = 0, **backbone_kwargs):
        super().__init__()
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
        if readout == "token" and num_global_tokens < 1:
            raise ValueError("readout='token' needs num_global_tokens >= 1")
        self.num_tasks, self.readout = num_tasks, readout
        self.backbone = GraphTransformer(in_channels, hidden_channels, num_layers, heads, num_global_tokens,
                                         pe_dim, edge_dim=edge_dim, dropout=dropout, **backbone_kwargs)
        if graph_feature_dim < 0:
            raise ValueError(f"graph_feature_dim must be >= 0, got {graph_feature_dim}")
        self.graph_feature_norm = GraphFeatureNorm(graph_feature_dim) if graph_feature_dim else None
        self.head = nn.Sequential(nn.Linear(hidden_channels + graph_feature_dim, hidden_channels), nn.GELU(),
                                  Dropout(dropout), nn.Linear(hidden_channels, num_tasks))

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                edge_attr: Optional[Tensor] = None, pe: Optional[Tensor] = None,
                num_graphs: Optional[int] = None, graph_features: Optional[Tensor] = None,
                **pe_kwargs) -> Tensor:
        """``pe_kwargs``: ``pe_eigvals`` and ``pe_mask``, see :meth:`GraphTransformer.forward`."""
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        num_graphs = check_batch(batch, x.size(0), num_graphs)  # B; may exceed batch.max() + 1
        # batch is range-checked now: the backbone's tokens / layouts skip that per-batch sync
        h, tokens = self.backbone(x, edge_index, edge_attr, batch, pe, num_graphs, check_range=False, **pe_kwargs)
        if self.readout == "token":
            g = tokens.mean(dim=1)  # (B, C)
        else:
            pool = {"mean": global_mean_pool, "sum": global_add_pool, "max": global_max_pool}[self.readout]
            g = pool(h, batch, size=num_graphs)  # (B, C)
        return self.head(graph_feature_input(g, self.graph_feature_norm, graph_features))  # (B, T)


class ProbabilityEnsemble(nn.Module):
    r"""Several independently trained multi-task binary classifiers as one model: the
    probabilities of its members are averaged (chemprop's ``--ensemble_size``; members differ
    in their initialisation and batch order, not in their data).

    ``forward`` takes whatever the members take and returns the **logit of the mean
    probability**, ``logit(mean_m σ(f_m(x)))`` (clamped to ``[-13.8, 13.8]``), so every caller
    of a single model (``sigmoid`` for probabilities, ROC-AUC on the logits, the training
    loop's evaluation) works unchanged. Averaging probabilities rather than logits is the
    usual choice: one over-confident member cannot dominate.

    Args:
        members: the trained models (at least one), all with the same ``num_tasks``.

    Shapes: the members' inputs -> logits ``(B, T)``; :meth:`member_probabilities` ``(M, B, T)``
    for M members. Its state dict is the members' under ``members.<m>.``.
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        members = list(members)
        if not members:
            raise ValueError("ProbabilityEnsemble needs at least one member")
        tasks = {getattr(m, "num_tasks", None) for m in members}
        if len(tasks) != 1:
            raise ValueError(f"ensemble members disagree on num_tasks: {sorted(map(str, tasks))}")
        self.members = nn.ModuleList(members)
        self.num_tasks = tasks.pop()

    def member_probabilities(self, *args, **kwargs) -> Tensor:
        """``(M, B, T)``: each member's probabilities."""
        return torch.stack([torch.sigmoid(m(*args, **kwargs).float()) for m in self.members])

    def forward(self, *args, **kwargs) -> Tensor:
        return torch.logit(self.member_probabilities(*args, **kwargs).mean(0), eps=1e-6)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({len(self.members)} x {type(self.members[0]).__name__})"
