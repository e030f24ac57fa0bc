r"""Efficient attention variants behind one interface, and which one to pick when.

Two kinds of option, each one argument:

* **normalization** of the edge scores (``GraphSelfAttention(normalization=...)``):
  ``"softmax"`` (default), ``"relu"``, ``"sigmoid"`` — same edges, same ``O(E·H·C)`` cost,
  see :mod:`graphattn.ops.normalization`.
* a **global branch** next to the edge attention of every block (GraphGPS / SGFormer /
  Polynormer recipe: local edges + a cheap all-pairs mechanism per graph,
  ``GraphTransformerBlock(global_attn=...)``), built by :func:`make_global_attention`:

  - ``"linear"``: :class:`~graphattn.nn.variants.linear_attention.LinearGlobalAttention`, kernel
    attention, ``O(n·H·M·C)`` per graph of n nodes; exact for its kernel (FAVOR+ → softmax
    as the number of random features M grows).
  - ``"reduced"``: :class:`~graphattn.nn.variants.reduced_attention.ReducedKeyAttention` (Linformer),
    ``O(n·r·H·C)``; exact when each of the r representatives is one node.
  - ``"clustered"``: :class:`~graphattn.nn.variants.clustered_attention.ClusteredAttention`
    (Reformer / Routing Transformer), ``O(n²/K·H·C)`` for K balanced clusters; exact
    (full attention) with ``num_clusters=1``.
  - ``"synthesizer"``: :class:`~graphattn.nn.variants.synthesizer.SynthesizerAttention`, learned
    position-pair weights, ``O(n²·H·C)`` but no ``QKᵀ``; fixed-size inputs only.
  - ``"compressed"``: :class:`~graphattn.nn.variants.compressed_attention.CompressedKeyAttention`
    (memory-compressed attention), keys and values summarised by a strided convolution over node
    order, ``O(n²/s·H·C)``; exact with ``stride=1`` and an identity kernel.
  - ``"fourier"``: :class:`~graphattn.nn.variants.fourier_mixing.FourierMixing` (FNet), the real part
    of a 2-D FFT over (node order, channels): no attention and no parameters; fixed-order inputs.
  - ``"sinkhorn"``: :class:`~graphattn.nn.variants.sinkhorn_attention.SinkhornAttention` (sparse
    Sinkhorn attention), a learned pattern: each block of node order attends to itself and to the
    block a Sinkhorn-normalised sort network puts next to it, ``O(n·s·H·C + (n/s)²·H·C)``; exact
    (full attention) with one block.

Every global module has the signature ``forward(x (N, channels), batch (N,) | None) ->
(N, channels)``; graphs of a batch never mix.

Which to pick (see ``benchmarks/variants.py`` for the measured trade-off): sparse patterns
(window + global positions/tokens) are exact and cheapest when the task is local plus a few
hubs; ``"linear"`` is the default global branch for large graphs (O(N), any size);
``"reduced"`` (``mode="pool"``) when the global signal is smooth in node order;
``"clustered"`` when long-range interactions are content-based (similar tokens) — it cannot
broadcast one node to all (a key reaches at most ``block_size`` queries per layer), and it
shares queries and keys by default (separate ones can fall into disjoint clusters);
``"synthesizer"`` only for fixed-size inputs whose attention is mostly positional.
"""
from __future__ import annotations

from torch import nn

from graphattn.nn.variants.clustered_attention import ClusteredAttention, cluster_graph
from graphattn.nn.variants.compressed_attention import CompressedKeyAttention
from graphattn.nn.variants.fourier_mixing import FourierMixing
from graphattn.nn.variants.linear_attention import LinearGlobalAttention, linear_attention
from graphattn.nn.variants.reduced_attention import ReducedKeyAttention
from graphattn.nn.variants.sinkhorn_attention import SinkhornAttention
from graphattn.nn.variants.synthesizer import SynthesizerAttention
from graphattn.ops.normalization import NORMALIZATIONS, edge_normalize, normalized_edge_attention

__all__ = ["GLOBAL_ATTNS", "NORMALIZATIONS", "make_global_attention", "edge_normalize",
           "normalized_edge_attention", "linear_attention", "cluster_graph", "LinearGlobalAttention",
           "ReducedKeyAttention", "ClusteredAttention", "SynthesizerAttention", "CompressedKeyAttention",
           "FourierMixing", "SinkhornAttention"]

GLOBAL_ATTNS = ("linear", "reduced", "clustered", "synthesizer", "compressed", "fourier", "sinkhorn")
_MODULES = {"linear": LinearGlobalAttention, "reduced": ReducedKeyAttention,
            "clustered": ClusteredAttention, "synthesizer": SynthesizerAttention,
            "compressed": CompressedKeyAttention, "fourier": FourierMixing,
            "sinkhorn": SinkhornAttention}


def make_global_attention(kind: str, channels: int, heads: int = 1, dropout: float = 0.0,
                          **kwargs) -> nn.Module:
    """Build the global attention module ``kind`` (one of :data:`GLOBAL_ATTNS`).

    Args:
        kind: ``"linear"``, ``"reduced"``, ``"clustered"``, ``"synthesizer"``, ``"compressed"``, ``"fourier"`` or ``"sinkhorn"``.
        channels, heads, dropout: passed on.
        **kwargs: the module's own options, e.g. ``feature_map="favor"`` (linear),
            ``num_keys=64, mode="pool"`` (reduced), ``num_clusters=8, method="lsh"``
            (clustered), ``max_nodes=1024, rank=32`` (synthesizer), ``stride=4`` (compressed),
            ``block_size=32, sinkhorn_iters=5, temperature=0.75`` (sinkhorn).

    Returns: an ``nn.Module`` with ``forward(x, batch=None) -> (N, channels)``.
    """
    if kind not in _MODULES:
        raise ValueError(f"global_attn must be one of {GLOBAL_ATTNS}, got {kind!r}")
    try:
        return _MODULES[kind](channels, heads, dropout=dropout, **kwargs)
    except TypeError as exc:
        raise TypeError(f"bad options for global_attn={kind!r}: {exc}") from exc
