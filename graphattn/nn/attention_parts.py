"""The parameters of :class:`~graphattn.nn.attention.GraphSelfAttention`: their layout per score
and option, their initialisation, state-dict conversion between layouts, and the projections.

Layouts (module names as PyG's convs use them):

- ``score="dot"``: one fused ``lin_qkv`` for a positive int ``in_channels``, else
  ``lin_query`` (targets) / ``lin_key`` / ``lin_value`` (sources), as ``TransformerConv``.
- ``score="additive"``: ``lin_qkv`` (two parts, one with ``share_weights``), else ``lin_r``
  (targets) / ``lin_l`` (sources; ``lin_r is lin_l`` with ``share_weights``), and ``att``, as ``GATv2Conv``.
- ``score="gat"``: ``lin`` (one projection for both sides), or ``lin_src`` / ``lin_dst`` for
  ``(F_src, F_dst)`` or -1 widths, and ``att_src`` / ``att_dst`` / ``att_edge``, all as ``GATConv``
  (glorot initialisation, no projection bias).
- ``lin_edge`` (no bias) with ``edge_dim``; the root term ``lin_skip`` (``root_weight``, with
  a bias) or ``res`` (``residual``, no bias, glorot); ``lin_beta`` (``beta``); ``bias`` (``out_bias``).
"""
from __future__ import annotations

import warnings
from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import Linear as PyGLinear
from torch_geometric.nn.inits import glorot, zeros

from graphattn.utils.validation import check_dtype, check_row_index, check_tensor_shape

__all__ = ["Parts", "channel_pair", "make_linear", "glorot_linear", "split_input", "empty_modules",
           "build_modules", "reset_modules", "projection_roles", "convert_state_dict", "project", "edge_features"]


class Parts(NamedTuple):
    """Projected inputs: target side (``(N, H, C)``, or None without target features), source
    side (1-2 tensors ``(N_src, H, C)``) and the root term (``(N, H*C | C)`` or None)."""
    dst: Optional[Tensor]
    src: List[Tensor]
    root: Optional[Tensor]


def channel_pair(in_channels) -> Tuple[int, int]:
    """``(F_src, F_dst)`` from an int or a pair; -1 = inferred on the first call (lazy)."""
    pair = tuple(in_channels) if isinstance(in_channels, (tuple, list)) else (in_channels, in_channels)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and (v >= 1 or v == -1)
                                 for v in pair):
        raise ValueError(f"in_channels must be a positive int, -1 (inferred on the first call) or a pair "
                         f"(F_src, F_dst) of those, got {in_channels!r}")
    return pair


def make_linear(in_channels: int, out_channels: int, bias: bool) -> nn.Module:
    """``nn.Linear``, or PyG's ``Linear`` (same initialisation) when the width is -1 (lazy)."""
    if in_channels == -1:
        return PyGLinear(-1, out_channels, bias=bias)
    return nn.Linear(in_channels, out_channels, bias=bias)


def glorot_linear(in_channels: int, out_channels: int, bias: bool) -> nn.Module:
    """PyG's ``Linear`` with glorot weights (as GATConv / GATv2Conv build theirs)."""
    return PyGLinear(in_channels, out_channels, bias=bias, weight_initializer="glorot")


def split_input(x, allow_missing_dst: bool = False):
    """``(x_src, x_dst, bipartite)`` from ``x`` or a pair ``(x_src, x_dst)`` (PyG's PairTensor).
    A pair of one tensor twice is the ordinary (non-bipartite) case; ``(x_src, None)`` (PyG's
    GATConv without target features) only with ``allow_missing_dst``."""
    if not isinstance(x, (tuple, list)):
        return x, x, False
    if len(x) != 2:
        raise ValueError(f"x must be a tensor or a pair (x_src, x_dst), got a {type(x).__name__} of {len(x)}")
    x_src, x_dst = x
    if x_dst is None and not allow_missing_dst:
        raise ValueError("x[1] (x_dst) is None: graph self-attention takes its queries and root term "
                         "from the target nodes' features; pass (x_src, x_dst)")
    return x_src, x_dst, x_src is not x_dst


def projection_roles(layer) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """Names of the target-side and source-side projections of the per-role layout."""
    if layer.score == "dot":
        return ("lin_query",), ("lin_key", "lin_value")
    if layer.score == "additive":
        return ("lin_r",), ("lin_l",)
    if layer.lin is not None:
        return ("lin",), ("lin",)
    return ("lin_dst",), ("lin_src",)


def empty_modules(layer) -> None:
    """Every module and parameter name the layer reads, set to None (a layout then fills some)."""
    for name in ("lin_qkv", "lin_query", "lin_key", "lin_value", "lin_l", "lin_r", "lin", "lin_src", "lin_dst",
                 "lin_edge", "lin_skip", "res", "lin_beta"):
        setattr(layer, name, None)
    for name in ("att", "att_src", "att_dst", "att_edge", "bias"):
        layer.register_parameter(name, None)


def build_modules(layer, f_src: int, f_dst: int, bias: bool) -> None:
    """The layer's modules for its score and options (see the module docstring), in the order
    PyG's convs build them (a seeded run draws the same initial weights as theirs for ``gat``)."""
    H, C = layer.heads, layer.out_channels
    HC, width = H * C, H * C if layer.concat else C
    empty_modules(layer)
    if layer.score == "gat":
        if isinstance(layer.in_channels, int):  # one projection for both sides (also lazy), as GATConv
            layer.lin = glorot_linear(f_src, HC, False)
        else:
            layer.lin_src, layer.lin_dst = glorot_linear(f_src, HC, False), glorot_linear(f_dst, HC, False)
        layer.att_src, layer.att_dst = (nn.Parameter(torch.empty(1, H, C)) for _ in range(2))
        if layer.edge_dim is not None:
            layer.lin_edge = glorot_linear(layer.edge_dim, HC, False)
            layer.att_edge = nn.Parameter(torch.empty(1, H, C))
    else:
        n_proj = 3 if layer.score == "dot" else (1 if layer.share_weights else 2)
        if isinstance(layer.in_channels, int) and layer.in_channels > 0:
            # One (n*H*C, F) weight for q, k, v (dot) or target/source parts (additive)
            layer.lin_qkv = nn.Linear(f_src, n_proj * HC, bias=bias)
        else:  # one projection per role, on its side, with PyG's names (lazy -1 widths too)
            side = {"lin_query": f_dst, "lin_key": f_src, "lin_value": f_src, "lin_l": f_src, "lin_r": f_dst}
            dst, src = projection_roles(layer)
            for name in ("lin_query", "lin_key", "lin_value", "lin_l", "lin_r"):
                if name in dst + src:
                    setattr(layer, name, make_linear(side[name], HC, bias))
            if layer.share_weights:
                layer.lin_r = layer.lin_l
        if layer.score == "additive":
            layer.att = nn.Parameter(torch.empty(H, C))
        if layer.edge_dim is not None:
            layer.lin_edge = nn.Linear(layer.edge_dim, HC, bias=False)
    if layer.root_weight:
        layer.lin_skip = make_linear(f_dst, width, bias)
    if layer.residual:
        layer.res = glorot_linear(f_dst, width, False)
    if layer.beta:
        layer.lin_beta = nn.Linear(3 * width, 1, bias=False)
    if layer.out_bias:
        layer.bias = nn.Parameter(torch.empty(width))


def reset_modules(layer) -> None:
    """Initial values: PyG's order and initialisers for ``score="gat"``; for the other scores the
    projections, ``lin_edge``, ``lin_skip`` (``nn.Linear``'s initialisation), ``att`` (xavier),
    then ``res``, ``lin_beta`` and a zero ``bias``."""
    if layer.score == "gat":
        for lin in (layer.lin, layer.lin_src, layer.lin_dst, layer.lin_edge, layer.res):
            if lin is not None:
                lin.reset_parameters()
        for att in (layer.att_src, layer.att_dst, layer.att_edge):
            glorot(att)
    else:
        for lin in (layer.lin_qkv, layer.lin_query, layer.lin_key, layer.lin_value, layer.lin_l, layer.lin_r,
                    layer.lin_edge, layer.lin_skip):
            if lin is not None:
                lin.reset_parameters()  # PyG's Linear skips a lazy (not yet shaped) weight
        if layer.att is not None:
            nn.init.xavier_uniform_(layer.att)
        for lin in (layer.res, layer.lin_beta):
            if lin is not None:
                lin.reset_parameters()
    if layer.score == "gat" and layer.lin_skip is not None:
        layer.lin_skip.reset_parameters()
    zeros(layer.bias)


def convert_state_dict(layer, state_dict: dict, prefix: str) -> None:
    """Make a state dict of the other projection layout load (in place): the fused ``lin_qkv``
    from PyG's per-role ``lin_query/key/value`` (``lin_r/lin_l`` additive) and back; PyG
    TransformerConv's unused ``lin_skip`` is dropped (with a warning) for ``root_weight=False``."""
    if layer.score == "gat":
        return
    dst, src = projection_roles(layer)
    roles = dst + src if not layer.share_weights else ("lin_l",)
    skip = [k for k in (f"{prefix}lin_skip.weight", f"{prefix}lin_skip.bias") if k in state_dict]
    if layer.lin_skip is None and skip and all(f"{prefix}{r}.weight" in state_dict for r in roles):
        # PyG's TransformerConv builds lin_skip even with root_weight=False (and never uses it)
        warnings.warn(f"{prefix or 'state dict'}: lin_skip.* ignored: this layer has root_weight=False "
                      "(PyG's TransformerConv keeps an unused lin_skip then)", stacklevel=3)
        for k in skip:
            state_dict.pop(k)
    for p in ("weight", "bias"):
        fused, parts = f"{prefix}lin_qkv.{p}", [f"{prefix}{r}.{p}" for r in roles]
        if layer.lin_qkv is not None and fused not in state_dict and all(k in state_dict for k in parts):
            state_dict[fused] = torch.cat([state_dict.pop(k) for k in parts])
            if layer.share_weights:  # GATv2Conv(share_weights=True) saves the shared weight twice
                state_dict.pop(f"{prefix}lin_r.{p}", None)
        elif layer.lin_qkv is None and fused in state_dict and not any(k in state_dict for k in parts):
            for k, w in zip(parts, state_dict.pop(fused).chunk(len(roles))):
                state_dict[k] = w
            if layer.share_weights:
                state_dict[f"{prefix}lin_r.{p}"] = state_dict[parts[0]]


def project(layer, x_src: Tensor, x_dst: Optional[Tensor]) -> Parts:
    """The target part (query / ``W_r x`` / ``W x``) of ``x_dst``, the source parts (key and
    value / ``W_l x`` / ``W x``) of ``x_src``, each ``(N, H, C)`` and contiguous, and the root term.
    One matrix product per projection: stacking them into one product measured no faster here
    (the same FLOPs) and its outputs are strided views the kernels would copy."""
    H, C = layer.heads, layer.out_channels
    root_lin = layer.lin_skip if layer.root_weight else layer.res
    if layer.lin_qkv is not None:
        # One (n*H*C, F) weight, applied part by part: each of q, k, v comes out contiguous
        # (N, H, C), so no kernel has to copy a strided view of a fused (N, n*H*C) output.
        n_proj = layer.lin_qkv.weight.size(0) // (H * C)
        W = layer.lin_qkv.weight.chunk(n_proj)
        b = layer.lin_qkv.bias.chunk(n_proj) if layer.lin_qkv.bias is not None else [None] * n_proj
        dst = F.linear(x_dst, W[0], b[0]).view(-1, H, C)
        src = ([dst] if n_proj == 1 and x_src is x_dst  # additive with share_weights: one part
               else [F.linear(x_src, W[i % n_proj], b[i % n_proj]).view(-1, H, C) for i in range(1, max(n_proj, 2))])
        return Parts(dst, src, root_lin(x_dst) if root_lin is not None else None)
    dst_names, src_names = projection_roles(layer)
    dst_mods = [getattr(layer, n) for n in dst_names] + ([root_lin] if root_lin is not None else [])
    src_mods = [getattr(layer, n) for n in src_names]
    if x_src is x_dst:  # a module shared by both sides (gat's lin, share_weights) runs once
        outs = {m: m(x_src) for m in dict.fromkeys(dst_mods + src_mods)}
        dst_out, src_out = [outs[m] for m in dst_mods], [outs[m] for m in src_mods]
    else:
        dst_out = [m(x_dst) for m in dst_mods] if x_dst is not None else [None] * len(dst_mods)
        src_out = [m(x_src) for m in src_mods]
    root = dst_out.pop() if root_lin is not None else None
    view = lambda t: None if t is None else t.view(-1, H, C)  # noqa: E731  (N, H, C)
    return Parts(view(dst_out[0]), [view(t) for t in src_out], root)


def edge_features(layer, edge_attr: Optional[Tensor], edge_attr_index: Optional[Tensor], E: int,
                  wdtype: Optional[torch.dtype]) -> Optional[Tensor]:
    """The projected edge features ``(E, H, C)`` added to keys and values (``gat``: the score
    term ``a_eᵀ W_e e`` ``(E, H)``, with ``a_e`` folded into ``W_e`` first); None without
    ``edge_dim``; with ``edge_attr_index`` the projection runs on the ``(U, D)`` table."""
    H, C = layer.heads, layer.out_channels
    if layer.lin_edge is None:
        if edge_attr is not None:
            raise ValueError("edge_attr was given but the layer has no edge_dim; "
                             "build it with edge_dim=D to use edge features")
        if edge_attr_index is not None:
            raise ValueError("edge_attr_index was given but the layer has no edge_dim")
        return None
    if edge_attr is None:
        raise ValueError(f"edge_attr is required: the layer was built with edge_dim={layer.edge_dim}")
    if wdtype is not None:
        check_dtype(edge_attr, wdtype, "edge_attr")
    if edge_attr.dim() == 1 and layer.edge_dim == 1:
        edge_attr = edge_attr[:, None]
    rows = E if edge_attr_index is None else edge_attr.size(0)
    check_tensor_shape(edge_attr, (rows, layer.edge_dim), "edge_attr")
    if layer.score == "gat":  # (H, D): a_e folded into W_e, so no (E, H, C) tensor
        w = torch.einsum("hcd,hc->hd", layer.lin_edge.weight.view(H, C, -1), layer.att_edge.view(H, C))
        feat = F.linear(edge_attr, w)  # (rows, H)
    else:
        feat = layer.lin_edge(edge_attr).view(-1, H, C)  # (rows, H, C)
    if edge_attr_index is None:
        return feat
    check_row_index(edge_attr_index, E, edge_attr.size(0), "edge_attr_index")
    return feat.index_select(0, edge_attr_index)
