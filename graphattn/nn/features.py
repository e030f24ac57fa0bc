"""Model building blocks: input feature encoders, graph-feature standardisation and the GCN-normalised graph."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from graphattn.utils.memo import recall, remember
from graphattn.utils.validation import check_dtype, check_features, mark_index_checked, scans_values

__all__ = ["FeatureEncoder", "GraphFeatureNorm", "gcn_normalized_graph", "graph_feature_input", "raise_non_finite_pe"]


class FeatureEncoder(nn.Module):
    """Maps input features to ``out_channels``: a Linear for float features, or a sum of one
    embedding per column for categorical (integer) features (as OGB's AtomEncoder).

    Args:
        in_channels (int): F, number of input columns.
        out_channels (int): output size.
        vocab_sizes (sequence of int, optional): if given, inputs are categorical and column c
            takes values in ``[0, vocab_sizes[c])``.
        name (str, default "x"): the input's name in error messages (``"edge_attr"`` for
            edge features).

    Shapes: ``(N, F)`` -> ``(N, out_channels)``.
    """

    def __init__(self, in_channels: int, out_channels: int, vocab_sizes: Optional[Sequence[int]] = None,
                 name: str = "x"):
        super().__init__()
        self.in_channels, self.out_channels, self.name = in_channels, out_channels, name
        self.vocab_sizes = list(vocab_sizes) if vocab_sizes is not None else None
        if self.vocab_sizes is not None:
            if len(self.vocab_sizes) != in_channels:
                raise ValueError(f"vocab_sizes has {len(self.vocab_sizes)} entries but in_channels={in_channels}")
            self.embeddings = nn.ModuleList(nn.Embedding(v, out_channels) for v in self.vocab_sizes)
            self.register_buffer("_max", torch.tensor(self.vocab_sizes) - 1, persistent=False)
            self.lin = None
        else:
            self.embeddings, self.lin = None, nn.Linear(in_channels, out_channels)

    def forward(self, x: Tensor) -> Tensor:
        given = tuple(x.shape)  # named in errors as the user passed it (a 1-D x is read as one column)
        owner = x  # the caller's tensor: facts read from its values are remembered for it
        if x.dim() == 1:
            x = x[:, None]
        if x.size(-1) != self.in_channels:
            raise ValueError(f"{self.name} must have {self.in_channels} columns, got shape {given}")
        if self.embeddings is None:
            if not x.is_floating_point():
                raise TypeError(f"{self.name}: float features expected, got {x.dtype}: convert numeric "
                                "features (e.g. uint8 pixels: x.float() / 255), or pass vocab_sizes for "
                                "categorical codes")
            check_dtype(x, self.lin.weight.dtype, self.name, "the model")
            check_features(x, self.in_channels, self.name)  # NaN/inf named on the user's tensor
            return self.lin(x)
        self._check_codes(x, owner)
        out = self.embeddings[0](x[:, 0])
        for c in range(1, self.in_channels):
            out = out + self.embeddings[c](x[:, c])
        return out

    def _check_codes(self, x: Tensor, owner: Tensor) -> None:
        """Codes ``x`` ``(N, F)`` within their vocabularies; read once per tensor (one device sync)
        and remembered for the caller's tensor ``owner`` (:mod:`graphattn.utils.memo`)."""
        if x.is_floating_point():
            raise TypeError(f"categorical {self._kind} features ({self.name}) must be integers, got {x.dtype}")
        tag = ("codes in vocabulary", tuple(self.vocab_sizes))
        if torch.compiler.is_compiling() or x.numel() == 0 or recall(tag, owner, default=False):
            return  # value checks: eager only (a compiled graph cannot branch on values)
        if bool(((x < 0) | (x > self._max)).any()):  # one device sync per tensor
            col = int(((x < 0) | (x > self._max)).any(0).nonzero()[0])
            raise ValueError(f"categorical {self._kind} feature: {self.name} column {col} has values outside "
                             f"[0, {self.vocab_sizes[col]}): min {int(x[:, col].min())}, max {int(x[:, col].max())}")
        remember(tag, True, owner)

    @property
    def _kind(self) -> str:
        return "edge" if self.name.startswith("edge") else "node"

    def unique_rows(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """Distinct rows of categorical ``x`` ``(E, F)``: ``(codes (U, F), index (E,))`` with
        ``x == codes[index]``. ``self(codes)[index]`` equals ``self(x)`` and anything linear
        applied after the encoder can run on U rows instead of E (molecules have ~10 distinct
        bond-feature rows per batch of thousands of bonds). Computed once per tensor (``unique``
        reads the device) and remembered for ``x`` (:mod:`graphattn.utils.memo`)."""
        if self.vocab_sizes is None:
            raise ValueError("unique_rows needs categorical features (vocab_sizes)")
        given, owner = tuple(x.shape), x
        if x.dim() == 1:
            x = x[:, None]
        if x.dim() != 2 or x.size(-1) != self.in_channels:
            raise ValueError(f"features must have {self.in_channels} columns, got shape {given}")
        self._check_codes(x, owner)
        if torch.compiler.is_compiling():  # torch.compile / torch.export: unique's output size depends on the data
            return x, torch.arange(x.size(0), device=x.device)
        tag = ("distinct rows", tuple(self.vocab_sizes))
        hit = recall(tag, owner)
        if hit is not None:
            return hit
        return remember(tag, self._distinct_rows(x), owner)

    def _distinct_rows(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """:meth:`unique_rows` of checked codes ``x`` ``(E, F)``, computed."""
        radix = [1]
        for v in self.vocab_sizes[:-1]:
            radix.append(radix[-1] * max(int(v), 1))
        if radix[-1] * max(int(self.vocab_sizes[-1]), 1) >= 2 ** 62:  # keys would overflow int64
            return torch.unique(x, dim=0, return_inverse=True)
        keys = (x.long() * torch.tensor(radix, device=x.device)).sum(1)  # (E,): mixed-radix key (no int matmul on CUDA)
        ukeys, index = torch.unique(keys, return_inverse=True)
        codes = torch.stack([(ukeys // r) % max(int(v), 1) for r, v in zip(radix, self.vocab_sizes)], 1)
        mark_index_checked(index, codes.size(0))  # valid by construction: layers skip the scan
        return codes.to(x.dtype), index


def gcn_normalized_graph(edge_index: Tensor, num_nodes: int,
                         dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    """``Â = D^-½ (A + I) D^-½`` as edges: ``edge_index`` ``(2, E)`` with its self-loops replaced
    by one per node ``(2, E' + N)`` and the weights ``(E' + N,)`` of ``dtype``. PyG's ``gcn_norm``
    does the same but routes through torch-sparse for some inputs; this is pure torch."""
    keep = edge_index[0] != edge_index[1]
    loops = torch.arange(num_nodes, device=edge_index.device).repeat(2, 1)  # (2, N)
    ei = torch.cat([edge_index[:, keep], loops], 1)  # (2, E' + N)
    deg = torch.bincount(ei[1], minlength=num_nodes).to(dtype)  # >= 1: every node has its loop
    return ei, deg[ei[0]].rsqrt() * deg[ei[1]].rsqrt()


def raise_non_finite_pe(pe: Tensor, eigvals: Optional[Tensor], mask: Optional[Tensor]) -> None:
    """Raise the ``ValueError`` for a positional encoding that came out non-finite: it names the
    input holding NaN / inf (``pe`` or ``pe_eigvals``; entries where ``mask`` is False are padding
    and may be NaN), or says the encoding overflowed when the inputs are finite."""
    keep = None if mask is None else mask.bool()
    for name, t in (("pe", pe), ("pe_eigvals", eigvals)):
        if t is None:
            continue
        bad = ~torch.isfinite(t) if keep is None else ~torch.isfinite(t) & keep
        if bool(bad.any()):
            what = "NaN" if bool((torch.isnan(t) & bad).any()) else "inf"
            raise ValueError(f"{name} contains {what} values (in {int(bad.any(-1).sum())} of {t.size(0)} rows)")
    raise ValueError("the positional encoding of pe overflowed to NaN/inf (pe values too large?)")


class GraphFeatureNorm(nn.Module):
    """Standardises graph-level features (e.g. RDKit descriptors) with training-set statistics.

    ``out = clamp((f - mean) / std, -clip, clip)``; ``mean`` and ``std`` are buffers (so they
    travel in the state dict and checkpoints), set once from the training graphs with
    :meth:`fit` before training (identity until then). Columns constant on the training set
    get ``std = 1``; the clamp keeps molecules far outside the training distribution finite
    and bounded. Non-finite inputs are an error (checked on CPU tensors, and on CUDA under
    ``torch.autograd.set_detect_anomaly(True)``: :func:`~graphattn.utils.validation.scans_values`).

    Shapes: f ``(B, D)`` -> ``(B, D)``.
    """

    def __init__(self, dim: int, clip: float = 6.0):
        super().__init__()
        self.dim, self.clip = int(dim), float(clip)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    @torch.no_grad()
    def fit(self, features: Tensor) -> "GraphFeatureNorm":
        """Set ``mean``/``std`` from training features ``(M, D)``."""
        if features.dim() != 2 or features.size(1) != self.dim or features.size(0) == 0:
            raise ValueError(f"fit needs graph features of shape (M >= 1, {self.dim}), got {tuple(features.shape)}")
        f = features.to(self.mean.device, torch.float64)
        if not torch.isfinite(f).all():
            bad = (~torch.isfinite(f)).any(0).nonzero().view(-1).tolist()
            raise ValueError(f"fit: graph features contain NaN or infinite values (columns {bad[:10]}"
                             f"{', ...' if len(bad) > 10 else ''})")
        std = f.std(0, unbiased=False) if f.size(0) > 1 else torch.zeros_like(f[0])
        self.mean.copy_(f.mean(0))
        self.std.copy_(torch.where(std > 1e-8, std, torch.ones_like(std)))
        return self

    def forward(self, f: Tensor) -> Tensor:
        if f.dim() != 2 or f.size(1) != self.dim:
            raise ValueError(f"graph features must have shape (B, {self.dim}), got {tuple(f.shape)}")
        if scans_values(f) and not bool(torch.isfinite(f).all()):  # CPU (or anomaly mode): no device sync
            raise ValueError("graph features contain NaN or infinite values")
        return ((f - self.mean) / self.std).clamp(-self.clip, self.clip)

    def extra_repr(self) -> str:
        return f"{self.dim}, clip={self.clip}"


def graph_feature_input(g: Tensor, norm: Optional[GraphFeatureNorm], features: Optional[Tensor]) -> Tensor:
    """The head's input: pooled graph vectors ``g`` ``(B, C)``, with the normalised graph
    features concatenated ``(B, C + D)`` when the model has them (``norm`` not None)."""
    if norm is None:
        if features is not None:
            raise ValueError("graph_features given, but the model was built with graph_feature_dim=0")
        return g
    if features is None:
        raise ValueError(f"this model needs graph_features of shape (B, {norm.dim}) (e.g. data.mol_desc "
                         "from graphattn.transforms.AddMolDescriptors)")
    if features.size(0) != g.size(0):
        raise ValueError(f"graph_features has {features.size(0)} rows but the batch has {g.size(0)} graphs")
    return torch.cat([g, norm(features.to(g.dtype))], dim=-1)
