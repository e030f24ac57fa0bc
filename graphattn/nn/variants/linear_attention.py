r"""Linear (kernel) attention over every node of each graph: O(N) instead of O(N²).

Softmax attention weighs key j for query i by ``exp(q_i·k_j/√C)``. Kernel attention
replaces that by ``φ(q_i)·φ(k_j)`` for a positive feature map φ (Katharopoulos et al. 2020,
"Transformers are RNNs"; Choromanski et al. 2021, "Rethinking Attention with Performers")
and reorders the products, per graph b::

    out_i = φ(q_i)ᵀ (Σ_{j∈b} φ(k_j) v_jᵀ) / φ(q_i)ᵀ (Σ_{j∈b} φ(k_j))

The two sums are one ``(M, C)`` matrix and one ``M`` vector per graph and head, so the cost
is ``O(N·H·M·C)`` time and ``O(N·H·(M + C) + B·H·M·C)`` memory: no ``N × N`` matrix. Graphs
of a batch never mix (the sums run over each graph's own nodes; the per-graph work is done
on padded ``(B, L, H, ·)`` layouts, see :class:`~graphattn.ops.padding.GraphLayout`, with graphs of
very different sizes padded in separate size classes so the padding stays under ``2N`` slots).

Feature maps (``M`` features per head):

* ``"elu"``: ``φ(x) = elu(x) + 1`` (Katharopoulos et al.), ``M = C``. A different kernel
  than softmax, exact for that kernel.
* ``"favor"``: positive orthogonal random features (Performer FAVOR+),
  ``φ(x) = exp(ωᵀx̃ - |x̃|²/2) / √M`` with ``x̃ = x / C^{1/4}`` and ``ω`` orthogonal Gaussian
  rows: ``E[φ(q)·φ(k)] = exp(q·k/√C)``, an unbiased estimate of softmax attention whose
  error shrinks as ``1/√M``.

FAVOR+ runs in log space so nothing overflows or underflows to a wrong ratio (large scores, or
queries whose features barely meet the keys'): each key feature ``m`` is shifted by its largest
value over the graph's keys, the query's feature ``m`` by minus that, and each query's features
by their largest; every shift cancels in the ratio and the denominator is at least 1 for a
non-empty graph. The ELU features need no shifts; the denominator is only kept from 0/0 (a
query whose every channel is below about -17 has features that round to 0 in float32, and gets 0).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.ops.padding import GraphLayout, graph_layout
from graphattn.utils.validation import check_features, check_int, check_tensor_shape

__all__ = ["FEATURE_MAPS", "linear_attention", "orthogonal_features", "LinearGlobalAttention"]

FEATURE_MAPS = ("elu", "favor")


def orthogonal_features(heads: int, num_features: int, channels: int,
                        generator: Optional[torch.Generator] = None) -> Tensor:
    """Performer's random feature matrix ``(H, M, C)``: blocks of ``C`` orthogonal rows,
    each row rescaled to the norm of a ``N(0, I_C)`` sample."""
    blocks = []
    for _ in range(heads):
        rows = []
        for _ in range(math.ceil(num_features / channels)):
            g = torch.randn(channels, channels, generator=generator)
            qm, r = torch.linalg.qr(g)
            qm = qm * torch.sign(torch.diagonal(r))[None, :]  # Haar-uniform rotation (sign fix)
            rows.append(qm.t())
        w = torch.cat(rows)[:num_features]  # (M, C) orthonormal rows
        norms = torch.randn(num_features, channels, generator=generator).norm(dim=1)
        blocks.append(w * norms[:, None])
    return torch.stack(blocks)  # (H, M, C)


def _log_features(x: Tensor, omega: Tensor) -> Tensor:
    """``(B, L, H, C)`` -> ``(B, L, H, M)``: FAVOR+'s ``log φ(x)`` up to a constant (its
    ``1/√M`` cancels in the ratio)."""
    x = x * x.size(-1) ** -0.25
    return torch.einsum("blhc,hmc->blhm", x, omega) - 0.5 * (x * x).sum(-1, keepdim=True)


def linear_attention(q: Tensor, k: Tensor, v: Tensor, batch: Optional[Tensor] = None,
                     feature_map: str = "elu", omega: Optional[Tensor] = None,
                     num_graphs: Optional[int] = None, eps: Optional[float] = None) -> Tensor:
    r"""Kernel attention of every node to every node of its own graph (module docstring).

    Args:
        q, k: ``(N, H, C)``; v: ``(N, H, C')``.
        batch: ``(N,)`` graph id per node (any order), or None for one graph.
        feature_map: ``"elu"`` or ``"favor"`` (needs ``omega``).
        omega: ``(H, M, C)`` random features for ``"favor"`` (:func:`orthogonal_features`).
        num_graphs: B (default ``batch.max() + 1``).
        eps: floor of the denominator (default: the dtype's smallest normal number: empty slots
            0/0 -> 0). An earlier absolute floor of 1e-6 cut real denominators (FAVOR+'s scale is
            arbitrary, the ELU one can be tiny) and shrank outputs.

    Cost: ``O(N·H·M·C)`` time, ``O(N·H·(M + C) + B·H·M·C)`` memory. The per-graph sums run
    on a padded ``(B, L)`` layout (``L`` the largest graph; ``B·L = N`` for equal sizes or one
    graph); when that would exceed ``2N`` slots, graphs are grouped by size class (sizes in
    ``[2^s, 2^(s+1))``) and each group is padded on its own: under ``2N`` slots in all.

    Shapes: returns ``(N, H, C')``.
    """
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}")
    check_tensor_shape(q, (None, None, None), "q")
    N, H, C = q.shape
    check_tensor_shape(k, (N, H, C), "k")
    check_tensor_shape(v, (N, H, None), "v")
    if feature_map == "favor":
        if omega is None:
            raise ValueError("feature_map='favor' needs omega of shape (H, M, C)")
        check_tensor_shape(omega, (H, None, C), "omega")
        omega = omega.to(q.dtype)
    layout = graph_layout(batch, N, num_graphs, device=q.device)
    if layout.regular or layout.B * layout.L <= 2 * N:
        return _padded_linear_attention(q, k, v, layout, feature_map, omega, eps)
    # Sizes differ a lot (one big graph among many small ones): padding every graph to the
    # largest would cost B·L >> N. Graphs are grouped by size class [2^s, 2^(s+1)) and each
    # group runs padded on its own, so at most ~2N slots are used in all.
    sizes = layout.sizes
    size_class = torch.floor(torch.log2(sizes.clamp_min(1).double())).long()  # (B,)
    node_class = size_class[layout.graph]  # (N,)
    pieces, order = [], []
    for c in torch.unique(node_class).tolist():
        idx = torch.nonzero(node_class == c).flatten()  # (n_c,) nodes of this size class
        graphs, local = torch.unique(layout.graph[idx], return_inverse=True)
        sub = GraphLayout(local, idx.numel(), graphs.numel(), device=q.device, check_range=False)
        pieces.append(_padded_linear_attention(q[idx], k[idx], v[idx], sub, feature_map, omega, eps))
        order.append(idx)
    inverse = torch.empty_like(layout.graph)
    inverse[torch.cat(order)] = torch.arange(N, device=q.device)
    return torch.cat(pieces)[inverse]  # (N, H, C') back in node order


def _padded_linear_attention(q: Tensor, k: Tensor, v: Tensor, layout: GraphLayout, feature_map: str,
                             omega: Optional[Tensor], eps: Optional[float]) -> Tensor:
    """:func:`linear_attention` on the padded ``(B, L, H, ·)`` layout of ``layout``."""
    Q, K, V = layout.pad(q), layout.pad(k), layout.pad(v)  # (B, L, H, C)
    mask = layout.mask[:, :, None, None]  # (B, L, 1, 1)
    if feature_map == "elu":  # positive features of moderate size: plain sums (F.elu is one fused op)
        fq = F.elu(Q) + 1.0
        fk = (F.elu(K) + 1.0).masked_fill(~mask, 0.0)  # empty slots add nothing
    else:
        lq, lk = _log_features(Q, omega), _log_features(K, omega).masked_fill(~mask, float("-inf"))
        with torch.no_grad():  # shifts that cancel in the ratio (constants for autograd)
            beta = lk.amax(dim=1) if lk.size(1) else lk.new_zeros(lk.shape[0], *lk.shape[2:])  # (B, H, M)
            beta = torch.where(torch.isfinite(beta), beta, torch.zeros_like(beta))  # empty graphs
        fk = torch.exp(lk - beta[:, None])  # (B, L, H, M), each feature's largest key = 1
        g = lq + beta[:, None]
        with torch.no_grad():
            shift = g.amax(dim=-1, keepdim=True)
        fq = torch.exp(g - shift)  # (B, L, H, M), largest = 1 per query
    kv = torch.einsum("blhm,blhc->bhmc", fk, V)  # (B, H, M, C') per-graph sums
    z = fk.sum(dim=1)  # (B, H, M); FAVOR+: >= 1 in a non-empty graph
    num = torch.einsum("blhm,bhmc->blhc", fq, kv)  # (B, L, H, C')
    den = torch.einsum("blhm,bhm->blh", fq, z)  # (B, L, H); FAVOR+: >= 1 unless the graph is empty
    if eps is not None:
        return layout.unpad(num / den.clamp_min(eps)[..., None])
    # 0/0 (empty slots; ELU features that round to 0) -> 0, with a zero gradient: a clamped
    # denominator would send num / tiny^2 = inf back, and inf * elu' = NaN
    safe = torch.where(den >= torch.finfo(den.dtype).tiny, den, torch.ones_like(den))
    return layout.unpad(num / safe[..., None])


class LinearGlobalAttention(nn.Module):
    r"""Global linear attention: every node attends to all nodes of its graph in O(N)
    (Katharopoulos et al. 2020 / Performer, Choromanski et al. 2021; the global branch of
    GraphGPS, Rampášek et al. 2022, and SGFormer, Wu et al. 2023)::

        q, k, v = W_q x, W_k x, W_v x;   out = W_o · linear_attention(q, k, v, batch)

    Args:
        channels (int): feature size in and out (divisible by ``heads``).
        heads (int, default 1): H; each head has ``C = channels // heads`` channels.
        feature_map (str, default "elu"): ``"elu"`` or ``"favor"``, see :func:`linear_attention`.
        num_features (int, optional): M random features per head for ``"favor"`` (default ``2C``).
            Drawn once (seeded by ``seed``) in :meth:`reset_parameters` and saved in the
            state dict; :meth:`redraw_features` draws new ones.
        dropout (float, default 0.0): dropout on the output.
        bias (bool, default True): biases of the projections.
        seed (int, default 0): seed of the random features.

    Cost: ``O(N·H·M·C)`` per forward; memory ``O(N·channels + B·H·M·C)``.

    Shapes: x ``(N, channels)``, batch ``(N,)`` (None = one graph) -> ``(N, channels)``.
    """

    def __init__(self, channels: int, heads: int = 1, feature_map: str = "elu",
                 num_features: Optional[int] = None, dropout: float = 0.0, bias: bool = True, seed: int = 0):
        super().__init__()
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}")
        if not isinstance(heads, int) or heads < 1 or channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        check_int("channels", channels, 1)
        if num_features is not None and feature_map != "favor":
            raise ValueError("num_features is only used by feature_map='favor'")
        if num_features is not None:
            check_int("num_features", num_features, 1)
        self.channels, self.heads, self.feature_map = channels, heads, feature_map
        self.dropout, self.seed = dropout, seed
        C = channels // heads
        self.num_features = (num_features or 2 * C) if feature_map == "favor" else C
        self.lin_qkv = nn.Linear(channels, 3 * channels, bias=bias)
        self.lin_out = nn.Linear(channels, channels, bias=bias)
        if feature_map == "favor":
            self.register_buffer("omega", torch.empty(heads, self.num_features, C))
        else:
            self.omega = None
        self.reset_parameters()

    def redraw_features(self, generator: Optional[torch.Generator] = None) -> None:
        """New random features for ``"favor"`` (Performer's periodic redraw): from ``generator``,
        else from seed ``seed + r`` at the r-th redraw since :meth:`reset_parameters`."""
        self._redraws += 1
        self._draw(generator or torch.Generator().manual_seed(self.seed + self._redraws))

    def _draw(self, generator: torch.Generator) -> None:
        if self.omega is not None:
            with torch.no_grad():
                self.omega.copy_(orthogonal_features(self.heads, self.num_features, self.channels // self.heads,
                                                     generator))

    def reset_parameters(self) -> None:
        self.lin_qkv.reset_parameters()
        self.lin_out.reset_parameters()
        self._redraws = 0
        self._draw(torch.Generator().manual_seed(self.seed))  # the features of seed ``seed``

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, num_graphs: Optional[int] = None) -> Tensor:
        check_features(x, self.channels, "x")
        N, H = x.size(0), self.heads
        q, k, v = self.lin_qkv(x).view(N, 3, H, self.channels // H).unbind(1)  # 3 x (N, H, C)
        out = linear_attention(q, k, v, batch, self.feature_map, self.omega, num_graphs)
        out = F.dropout(out.reshape(N, self.channels), self.dropout, self.training)  # (N, H*C)
        return self.lin_out(out)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"feature_map={self.feature_map!r})")
