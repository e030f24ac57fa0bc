"""GraphTransformer backbone and the graph classification model built on it."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

from graphattn.nn.block import GraphTransformerBlock, make_norm
from graphattn.nn.dropout import Dropout
from graphattn.nn.encodings import LapPEEncoder
from graphattn.nn.features import FeatureEncoder, GraphFeatureNorm, graph_feature_input, raise_non_finite_pe
from graphattn.nn.global_tokens import GlobalTokens
from graphattn.ops.csr import as_edge_index
from graphattn.ops.padding import check_batch
from graphattn.utils.validation import (check_dtype, check_edge_index, check_features, check_int, check_model_input,
                                       scans_values)

__all__ = ["GraphTransformer", "GraphClassifier", "READOUTS", "PE_KINDS"]

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
        heads (int, default 4): attention heads H (passed to every block, as the options below).
        dropout (float, default 0.0): dropout of every block.
        norm (str, default "layer"): ``"layer"``, ``"batch"`` or ``"none"``.
        score (str, default "dot"): ``"dot"`` or ``"additive"``.
        normalization (str, default "softmax"): ``"softmax"``, ``"relu"`` or ``"sigmoid"``.
        global_attn (str, optional): ``None``, ``"linear"``, ``"reduced"``, ``"clustered"`` or
            ``"synthesizer"``, with ``global_attn_kwargs``; see :class:`GraphTransformerBlock`.
        local_mpnn (str, optional): ``None``, ``"gine"`` or ``"gin"``: a GraphGPS-style message-passing
            branch on the graph's own edges.
        impl (str, default "auto"): the edge attention backend (``"auto"``, ``"fused"``, ``"chunked"``,
            ...), see :class:`GraphSelfAttention`.
        num_global_tokens (int, default 0): G learnable global tokens per graph.
        pe_dim (int, default 0): K, size of the positional encoding passed as ``pe``.
        pe_kind (str, default "laplacian"): ``"laplacian"`` (random eigenvector sign flips in
            training, :class:`~graphattn.nn.encodings.LapPEEncoder`) or ``"linear"`` (e.g. RWSE).
        edge_dim (int, optional): edge feature columns D.
        node_vocab_sizes (list of int, optional): categorical node inputs, see :class:`FeatureEncoder`.
        edge_vocab_sizes (list of int, optional): categorical edge inputs, see :class:`FeatureEncoder`.
        edge_pe_dim (int, default 0): R, size of a float per-edge encoding passed as ``edge_pe`` (the
            relative random-walk vectors of :class:`~graphattn.transforms.AddRRWP`), encoded by a
            linear layer and added to the edge features (or the edge features, without ``edge_dim``);
            every layer's scores and values read it.

    Shapes:
        x ``(N, F)``, edge_index ``(2, E)``, edge_attr ``(E, D)``, batch ``(N,)``, pe ``(N, K)``,
        edge_pe ``(E, R)`` -> node states ``(N, C)`` and token states ``(B, G, C)`` (or None).
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, heads: int = 4,
                 num_global_tokens: int = 0, pe_dim: int = 0, pe_kind: str = "laplacian",
                 edge_dim: Optional[int] = None, dropout: float = 0.0, attn_dropout: float = 0.0,
                 norm: str = "layer", score: str = "dot", normalization: str = "softmax",
                 global_attn: Optional[str] = None, global_attn_kwargs: Optional[dict] = None,
                 node_vocab_sizes: Optional[Sequence[int]] = None,
                 edge_vocab_sizes: Optional[Sequence[int]] = None, local_mpnn: Optional[str] = None,
                 impl: str = "auto", edge_pe_dim: int = 0):
        super().__init__()
        if pe_kind not in PE_KINDS:
            raise ValueError(f"pe_kind must be one of {PE_KINDS}, got {pe_kind!r}")
        for name, value, least in (("in_channels", in_channels, 1), ("hidden_channels", hidden_channels, 1),
                                   ("num_layers", num_layers, 0), ("heads", heads, 1),
                                   ("num_global_tokens", num_global_tokens, 0), ("pe_dim", pe_dim, 0),
                                   ("edge_pe_dim", edge_pe_dim, 0)):
            check_int(name, value, least)
        if edge_dim is not None:
            check_int("edge_dim", edge_dim, 1)
        self.in_channels, self.hidden_channels, self.num_layers = in_channels, hidden_channels, num_layers
        self.num_global_tokens, self.pe_dim, self.edge_dim = num_global_tokens, pe_dim, edge_dim
        self.node_encoder = FeatureEncoder(in_channels, hidden_channels, node_vocab_sizes)
        self.edge_encoder = (FeatureEncoder(edge_dim, hidden_channels, edge_vocab_sizes, name="edge_attr")
                             if edge_dim is not None else None)
        self.edge_pe_dim = edge_pe_dim
        self.edge_pe_encoder = nn.Linear(edge_pe_dim, hidden_channels) if edge_pe_dim > 0 else None
        inner_edge_dim = hidden_channels if edge_dim is not None or edge_pe_dim > 0 else None
        if pe_dim > 0 and pe_kind == "laplacian":
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
                                  global_attn_kwargs=global_attn_kwargs, local_mpnn=local_mpnn, impl=impl)
            for _ in range(num_layers))
        self.norm_out = make_norm(norm, hidden_channels)

    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def _encode_pe(self, x: Tensor, pe: Optional[Tensor], batch: Optional[Tensor], num_graphs: Optional[int],
                   pe_eigvals: Optional[Tensor], pe_mask: Optional[Tensor], check_range: bool) -> Optional[Tensor]:
        """The positional encoding's features ``(N, C)`` (None without ``pe_dim``), its input checked."""
        if self.pe_encoder is None and pe is not None:
            raise ValueError(f"pe of shape {tuple(pe.shape)} was given, but the model was built with pe_dim=0: "
                             "build it with pe_dim=K (or pass pe=None)")
        if self.pe_encoder is None:
            return None
        if pe is None:
            raise ValueError(f"pe of shape (N, {self.pe_dim}) is required: the model was built with "
                             f"pe_dim={self.pe_dim}")
        if pe.shape != (x.size(0), self.pe_dim):
            raise ValueError(f"pe must have shape ({x.size(0)}, {self.pe_dim}), got {tuple(pe.shape)}")
        check_dtype(pe, next(self.pe_encoder.parameters()).dtype, "pe", "the model")
        if self.pe_kind == "laplacian":
            hp = self.pe_encoder(pe, eigvals=pe_eigvals, mask=pe_mask, batch=batch, num_graphs=num_graphs,
                                 check_range=check_range, check_values=False)  # hp checked below
        else:
            hp = self.pe_encoder(pe)
        # NaN/inf in pe or pe_eigvals, or an overflow, shows in hp: one scan where it waits
        # for no device (CPU, or under anomaly detection; scans_values)
        if hp.numel() and scans_values(hp) and not bool(torch.isfinite(hp).all()):
            raise_non_finite_pe(pe, pe_eigvals, pe_mask)
        return hp

    def _encode_edges(self, edge_attr: Optional[Tensor], edge_index: Tensor,
                      edge_pe: Optional[Tensor] = None) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """``(edge features, edge_attr_index)``: the encoded ``(E, C)`` features, or for categorical edges
        the ``(U, C)`` table of distinct rows and each edge's row ``(E,)``; ``(None, None)`` without edges.
        With ``edge_pe_dim``, the encoded ``edge_pe`` is added per edge (``(E, C)``, no table)."""
        if self.edge_pe_encoder is None:
            if edge_pe is not None:
                raise ValueError(f"edge_pe of shape {tuple(edge_pe.shape)} was given, but the model was built with "
                                 "edge_pe_dim=0: build it with edge_pe_dim=R (or pass edge_pe=None)")
            return self._encode_edge_attr(edge_attr, edge_index)
        if edge_pe is None or edge_pe.shape != (edge_index.size(1), self.edge_pe_dim):
            got = None if edge_pe is None else tuple(edge_pe.shape)
            raise ValueError(f"edge_pe of shape ({edge_index.size(1)}, {self.edge_pe_dim}) (one row per edge) is "
                             f"required: the model was built with edge_pe_dim={self.edge_pe_dim}; got {got}")
        check_features(edge_pe, self.edge_pe_dim, "edge_pe")
        check_dtype(edge_pe, self.edge_pe_encoder.weight.dtype, "edge_pe", "the model")
        out = self.edge_pe_encoder(edge_pe)
        if self.edge_encoder is None and edge_attr is None:
            return out, None
        feats, index = self._encode_edge_attr(edge_attr, edge_index)
        return out + (feats if index is None else feats[index]), None

    def _encode_edge_attr(self, edge_attr: Optional[Tensor],
                          edge_index: Tensor) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        if self.edge_encoder is None:
            if edge_attr is not None:  # silently dropping them would train without the user's edge features
                raise ValueError(f"edge_attr of shape {tuple(edge_attr.shape)} was given, but the model has no edge "
                                 "encoder: build it with edge_dim=D (or pass edge_attr=None)")
            return None, None
        if edge_attr is None:
            raise ValueError(f"edge_attr is required: the model was built with edge_dim={self.edge_dim}")
        if not isinstance(edge_attr, Tensor) or edge_attr.dim() not in (1, 2) \
                or edge_attr.size(0) != edge_index.size(1):
            raise ValueError(f"edge_attr must have shape ({edge_index.size(1)}, {self.edge_dim}) (one row per "
                             f"edge of edge_index), got "
                             f"{tuple(edge_attr.shape) if isinstance(edge_attr, Tensor) else type(edge_attr)}")
        if self.edge_encoder.vocab_sizes is not None:
            # Categorical edges: encode each distinct row once; every layer then projects U rows (not E)
            # and gathers them per edge (same values, fewer FLOPs on molecules)
            codes, edge_attr_index = self.edge_encoder.unique_rows(edge_attr)
            return self.edge_encoder(codes), edge_attr_index  # (U, C), (E,)
        return self.edge_encoder(edge_attr), None  # (E, C)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, pe: Optional[Tensor] = None,
                num_graphs: Optional[int] = None, *, pe_eigvals: Optional[Tensor] = None,
                pe_mask: Optional[Tensor] = None, edge_pe: Optional[Tensor] = None,
                check_range: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
        """``pe_eigvals`` / ``pe_mask`` ``(N, K)``: eigenvalues and padding mask stored by
        :class:`~graphattn.transforms.AddLaplacianPE` (``data.lap_eigval``, ``data.lap_pe_mask``);
        ``edge_pe`` ``(E, R)``: per-edge encodings (``data.edge_rrwp`` of :class:`~graphattn.transforms.AddRRWP`).

        ``edge_index`` is range-checked here, once per tensor (remembered, so the layers' CSR
        build and the global tokens do not scan it again). ``batch`` is shape-checked here and
        its ids range-checked where they index (global tokens, layouts) unless
        ``check_range=False``: the caller already checked them against ``num_graphs`` (as
        :class:`GraphClassifier` does), so no component repeats that per-batch sync."""
        check_model_input(x)
        edge_index, _ = as_edge_index(edge_index, x.size(0), per_edge=(edge_attr, edge_pe))  # PyG's sparse adj_t too
        check_edge_index(edge_index, x.size(0))
        if batch is not None:
            check_batch(batch, x.size(0), num_graphs, check_range=False)
            batch = batch.long()  # int32 / uint8 ids are accepted; PyG's pooling and indexing want int64
        h = self.node_encoder(x)
        hp = self._encode_pe(x, pe, batch, num_graphs, pe_eigvals, pe_mask, check_range)
        if hp is not None:
            h = h + hp
        edge_attr, edge_attr_index = self._encode_edges(edge_attr, edge_index, edge_pe)
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

    Example::

        >>> import torch
        >>> from graphattn import GraphClassifier
        >>> x = torch.randn(7, 9)                                   # two graphs: 3 + 4 nodes
        >>> edge_index = torch.tensor([[0, 1, 1, 2, 3, 4, 5], [1, 0, 2, 1, 4, 5, 6]])
        >>> batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
        >>> model = GraphClassifier(9, 32, num_tasks=12, num_layers=2).eval()
        >>> model(x, edge_index, batch).shape                       # one logit per graph and task
        torch.Size([2, 12])
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
        check_int("num_tasks", num_tasks, 1)
        self.num_tasks, self.readout = num_tasks, readout
        self.backbone = GraphTransformer(in_channels, hidden_channels, num_layers, heads, num_global_tokens,
                                         pe_dim, edge_dim=edge_dim, dropout=dropout, **backbone_kwargs)
        if graph_feature_dim < 0:
            raise ValueError(f"graph_feature_dim must be >= 0, got {graph_feature_dim}")
        self.graph_feature_norm = GraphFeatureNorm(graph_feature_dim) if graph_feature_dim else None
        self.head = nn.Sequential(nn.Linear(hidden_channels + graph_feature_dim, hidden_channels), nn.GELU(),
                                  Dropout(dropout), nn.Linear(hidden_channels, num_tasks))

    def reset_parameters(self) -> None:
        """Re-initialise every trained weight (backbone and head); the fitted statistics of
        ``graph_feature_norm`` are data, not weights, and are kept."""
        self.backbone.reset_parameters()
        for layer in self.head:
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                edge_attr: Optional[Tensor] = None, pe: Optional[Tensor] = None,
                num_graphs: Optional[int] = None, graph_features: Optional[Tensor] = None,
                **pe_kwargs) -> Tensor:
        """``pe_kwargs``: ``pe_eigvals``, ``pe_mask`` and ``edge_pe``, see :meth:`GraphTransformer.forward`."""
        check_model_input(x)
        if batch is None:  # one graph (or num_graphs, the others empty): ids known, nothing to read
            num_graphs = 1 if num_graphs is None else check_int("num_graphs", num_graphs, 1 if x.size(0) else 0)
        else:  # B; may exceed batch.max() + 1. The ids are read once per batch tensor
            num_graphs = check_batch(batch, x.size(0), num_graphs)
            batch = batch.long()  # int32 / uint8 ids are accepted; PyG's pooling wants int64
        # batch is range-checked now: the backbone's tokens / layouts skip that per-batch sync; without
        # one the backbone gets None (not a fresh zeros tensor per call, whose token graph and CSR
        # view would be built anew on every call)
        h, tokens = self.backbone(x, edge_index, edge_attr, batch, pe, num_graphs, check_range=False, **pe_kwargs)
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)  # for the pooling
        if self.readout == "token":
            g = tokens.mean(dim=1)  # (B, C)
        else:
            pool = {"mean": global_mean_pool, "sum": global_add_pool, "max": global_max_pool}[self.readout]
            g = pool(h, batch, size=num_graphs)  # (B, C)
        return self.head(graph_feature_input(g, self.graph_feature_norm, graph_features))  # (B, T)
