"""Message-passing baselines built from PyG layers, sized like our models.

* :class:`ConvBaseline`: GCNConv, GATConv, TransformerConv or GINConv of the same depth and width
  as :class:`~graphattn.NodeClassifier` / :class:`~graphattn.GraphClassifier`; used by
  ``graphattn train ... --baseline gcn|gat|transformer|gin`` and by ``examples/social_baselines.py``
  to compare, in the same run and on the same splits, our models against the classic
  message-passing layers (Kipf & Welling 2017; Veličković et al. 2018; Shi et al. 2021;
  Xu et al. 2019).
* :class:`MPNNBaseline`: the molecule baseline (GINE or GAT). It shares our input encoders
  (:class:`~graphattn.nn.features.FeatureEncoder`, categorical atom and bond embeddings), readout
  and head, and differs only in the layers in between, so a comparison trained by the same loop
  isolates the effect of the graph transformer.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import (GATConv, GCNConv, GINConv, GINEConv, TransformerConv, global_add_pool, global_max_pool,
                                global_mean_pool)
from torch_geometric.nn.norm import BatchNorm

from graphattn.nn.features import FeatureEncoder, GraphFeatureNorm, graph_feature_input

__all__ = ["ConvBaseline", "MPNNBaseline", "BASELINES", "EDGE_BASELINES", "BASELINE_CONVS"]

BASELINES = ("gcn", "gat", "transformer", "gin")
EDGE_BASELINES = ("gat", "transformer", "gin")  # the ones that take edge features (edge_dim)


def _conv(kind: str, in_channels: int, out_channels: int, heads: int, dropout: float,
          edge_dim: Optional[int] = None) -> nn.Module:
    if kind == "gcn":
        return GCNConv(in_channels, out_channels)
    if kind == "gin":  # GIN-0: MLP((1 + 0)·h_i + Σ_j h_j), the MLP of the GIN paper (2 layers, batch norm)
        # PyG's BatchNorm: batch norm that accepts a one-node batch
        mlp = nn.Sequential(nn.Linear(in_channels, out_channels),
                            BatchNorm(out_channels, allow_single_element=True), nn.ReLU(),
                            nn.Linear(out_channels, out_channels))
        # with edge features GINE: Σ_j ReLU(h_j + W e_ji) (Hu et al. 2020)
        return GINEConv(mlp, train_eps=False, edge_dim=edge_dim) if edge_dim else GINConv(mlp, train_eps=False)
    if out_channels % heads != 0:
        raise ValueError(f"hidden_channels ({out_channels}) must be divisible by heads ({heads})")
    if kind == "gat":  # heads concatenated: H x (C / H) = C outputs, as our layer
        return GATConv(in_channels, out_channels // heads, heads=heads, dropout=dropout, edge_dim=edge_dim)
    if kind == "transformer":
        return TransformerConv(in_channels, out_channels // heads, heads=heads, dropout=dropout, edge_dim=edge_dim)
    raise ValueError(f"baseline must be one of {BASELINES}, got {kind!r}")


class ConvBaseline(nn.Module):
    r"""``num_layers`` PyG convolutions of ``hidden_channels`` outputs, then a head.

    ``h⁰ = Dropout(x)``; ``hˡ = Dropout(ELU(Convˡ(hˡ⁻¹)))`` (GAT/TransformerConv with
    ``heads`` heads of ``hidden_channels // heads`` channels, concatenated, attention
    dropout ``dropout``); node level: ``Linear(hidden, out)``; graph level: a mean/sum/max
    readout and the same MLP head as :class:`~graphattn.GraphClassifier`.

    Args:
        kind (str): ``"gcn"``, ``"gat"``, ``"transformer"`` or ``"gin"``.
        in_channels, hidden_channels, out_channels (int): F, C and the number of classes.
        num_layers (int, default 2), heads (int, default 4), dropout (float, default 0.5).
        graph_level (bool, default False): pool to one vector per graph.
        readout (str, default "mean"): ``"mean"``, ``"sum"`` or ``"max"`` (graph level).
        edge_dim (int, optional): edge feature width, for ``"gat"``, ``"transformer"`` (their
            ``edge_dim``) and ``"gin"`` (then GINEConv); GCNConv takes none.

    Shapes: x ``(N, F)``, edge_index ``(2, E)``, batch ``(N,)``, edge_attr ``(E, edge_dim)``
    -> ``(N, out)`` or ``(B, out)``.
    """

    def __init__(self, kind: str, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, heads: int = 4, dropout: float = 0.5,
                 graph_level: bool = False, readout: str = "mean", edge_dim: Optional[int] = None):
        super().__init__()
        if kind not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, got {kind!r}")
        if edge_dim is not None and kind not in EDGE_BASELINES:
            raise ValueError(f"baseline {kind!r} takes no edge features (edge_dim); {EDGE_BASELINES} do")
        if readout not in ("mean", "sum", "max"):
            raise ValueError(f"readout must be one of ('mean', 'sum', 'max'), got {readout!r}")
        self.kind, self.dropout, self.graph_level, self.readout = kind, dropout, graph_level, readout
        self.edge_dim = edge_dim
        dims = [in_channels] + [hidden_channels] * num_layers
        self.convs = nn.ModuleList(_conv(kind, dims[i], dims[i + 1], heads, dropout, edge_dim)
                                   for i in range(num_layers))
        if graph_level:
            self.head = nn.Sequential(nn.Linear(hidden_channels, hidden_channels), nn.GELU(),
                                      nn.Dropout(dropout), nn.Linear(hidden_channels, out_channels))
        else:
            self.head = nn.Linear(hidden_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                num_graphs: Optional[int] = None, edge_attr: Optional[Tensor] = None, **_ignored) -> Tensor:
        if self.edge_dim is not None and edge_attr is None:
            raise ValueError(f"this {self.kind} baseline was built with edge_dim={self.edge_dim}: pass edge_attr")
        extra = (edge_attr,) if self.edge_dim is not None else ()
        h = F.dropout(x, self.dropout, self.training)
        for conv in self.convs:
            h = F.dropout(F.elu(conv(h, edge_index, *extra)), self.dropout, self.training)
        if not self.graph_level:
            return self.head(h)
        if batch is None:
            batch = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
        pool = {"mean": global_mean_pool, "sum": global_add_pool, "max": global_max_pool}[self.readout]
        return self.head(pool(h, batch, size=num_graphs))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.kind!r}, layers={len(self.convs)})"


BASELINE_CONVS = ("gine", "gat")


class MPNNBaseline(nn.Module):
    r"""GINE (Hu et al. 2020) or GAT (Veličković et al. 2018) graph classifier.

    ``h⁰ = Enc(x)``, ``e = Enc(edge_attr)``; per layer ``hˡ = hˡ⁻¹ + Dropout(ReLU(BN(Conv(hˡ⁻¹, e))))``;
    then mean pooling and the head of :class:`~graphattn.GraphClassifier`
    (Linear → GELU → Dropout → Linear). GINE's MLP is Linear(C, 2C) → ReLU → Linear(2C, C)
    (plain GIN when there are no edge features); GAT uses ``heads`` heads of ``C // heads`` channels, concatenated, with edge features.

    Args:
        in_channels (int): node feature columns F.
        hidden_channels (int): C.
        num_tasks (int): T outputs.
        num_layers (int, default 4), heads (int, default 4, GAT only), dropout (float, default 0.0).
        conv (str, default "gine"): ``"gine"`` or ``"gat"``.
        edge_dim (int, optional): edge feature columns D.
        node_vocab_sizes / edge_vocab_sizes (optional): categorical inputs, see FeatureEncoder.
        graph_feature_dim (int, default 0): graph-level features concatenated before the head,
            as in :class:`~graphattn.GraphClassifier`.

    Shapes: x ``(N, F)``, edge_index ``(2, E)``, batch ``(N,)``, edge_attr ``(E, D)`` -> ``(B, T)``.
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_tasks: int, num_layers: int = 4,
                 heads: int = 4, dropout: float = 0.0, conv: str = "gine", edge_dim: Optional[int] = None,
                 node_vocab_sizes: Optional[Sequence[int]] = None,
                 edge_vocab_sizes: Optional[Sequence[int]] = None, graph_feature_dim: int = 0):
        super().__init__()
        if conv not in BASELINE_CONVS:
            raise ValueError(f"conv must be one of {BASELINE_CONVS}, got {conv!r}")
        if conv == "gat" and hidden_channels % heads != 0:
            raise ValueError(f"hidden_channels ({hidden_channels}) must be divisible by heads ({heads})")
        C = hidden_channels
        self.conv, self.num_tasks, self.dropout = conv, num_tasks, dropout
        self.node_encoder = FeatureEncoder(in_channels, C, node_vocab_sizes)
        self.edge_encoder = FeatureEncoder(edge_dim, C, edge_vocab_sizes) if edge_dim is not None else None
        inner = C if edge_dim is not None else None
        if conv == "gine":  # without edge features GINE is GIN (GINEConv itself would fail on e=None)
            mlp = lambda: nn.Sequential(nn.Linear(C, 2 * C), nn.ReLU(), nn.Linear(2 * C, C))  # noqa: E731
            self.convs = nn.ModuleList(
                (GINEConv(mlp(), train_eps=True, edge_dim=inner) if edge_dim is not None
                 else GINConv(mlp(), train_eps=True)) for _ in range(num_layers))
        else:
            self.convs = nn.ModuleList(GATConv(C, C // heads, heads=heads, edge_dim=inner)
                                       for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(C) for _ in range(num_layers))
        self.graph_feature_norm = GraphFeatureNorm(graph_feature_dim) if graph_feature_dim else None
        self.head = nn.Sequential(nn.Linear(C + graph_feature_dim, C), nn.GELU(), nn.Dropout(dropout),
                                  nn.Linear(C, num_tasks))

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                edge_attr: Optional[Tensor] = None, pe: Optional[Tensor] = None,
                num_graphs: Optional[int] = None, graph_features: Optional[Tensor] = None,
                **pe_kwargs) -> Tensor:
        """``pe`` and ``pe_kwargs`` are accepted (and ignored) so that both model kinds share
        one call signature."""
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if batch.numel() else 1
        h = self.node_encoder(x)
        e = self.edge_encoder(edge_attr) if self.edge_encoder is not None else None
        for conv, norm in zip(self.convs, self.norms):
            out = conv(h, edge_index, e) if e is not None else conv(h, edge_index)
            h = h + nn.functional.dropout(torch.relu(norm(out)), self.dropout, self.training)
        g = global_mean_pool(h, batch, size=num_graphs)  # (B, C)
        return self.head(graph_feature_input(g, self.graph_feature_norm, graph_features))  # (B, T)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.conv}, layers={len(self.convs)}, tasks={self.num_tasks})"
