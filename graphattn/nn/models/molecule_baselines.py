"""Message-passing baselines built from PyG layers, sized like :class:`~graphattn.GraphClassifier`.

They share our input encoders (:class:`~graphattn.nn.models.graph_transformer.FeatureEncoder`, categorical atom
and bond embeddings), readout and head, and differ only in the layers in between, so a
comparison trained by the same loop isolates the effect of the graph transformer.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GINConv, GINEConv, global_mean_pool

from graphattn.nn.models.graph_transformer import FeatureEncoder, GraphFeatureNorm, graph_feature_input

__all__ = ["MPNNBaseline", "BASELINE_CONVS"]

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
