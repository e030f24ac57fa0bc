"""Projection helpers of :class:`~graphattn.nn.attention.GraphSelfAttention`: widths, linear
layers as PyG builds them, the projected inputs (:class:`Parts`), and state-dict conversion
between the fused ``lin_qkv`` layout and PyG's per-role modules. Which modules a layer has is
its score's choice (:meth:`graphattn.nn.attention.score.EdgeScore.setup`); the root term
(``lin_skip`` / ``res``), ``lin_beta`` and ``bias`` are the layer's.
"""
from __future__ import annotations

import warnings
from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import Linear as PyGLinear

__all__ = ["Parts", "channel_pair", "make_linear", "glorot_linear", "split_input", "empty_modules",
           "convert_state_dict", "project_parts", "MODULE_NAMES", "PARAMETER_NAMES"]

#: every module and parameter name a layer of any built-in score reads (None when unused)
MODULE_NAMES = ("lin_qkv", "lin_query", "lin_key", "lin_value", "lin_l", "lin_r", "lin", "lin_src", "lin_dst",
                "lin_edge", "lin_skip", "res", "lin_beta")
PARAMETER_NAMES = ("att", "att_src", "att_dst", "att_edge", "bias")


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


def empty_modules(layer) -> None:
    """Every module and parameter name the layer reads, set to None (a layout then fills some)."""
    for name in MODULE_NAMES:
        setattr(layer, name, None)
    for name in PARAMETER_NAMES:
        layer.register_parameter(name, None)


def convert_state_dict(layer, state_dict: dict, prefix: str,
                       roles: Tuple[Tuple[str, ...], Tuple[str, ...]]) -> None:
    """Make a state dict of the other projection layout load (in place): the fused ``lin_qkv``
    from PyG's per-role ``lin_query/key/value`` (``lin_r/lin_l`` additive) and back; PyG
    TransformerConv's unused ``lin_skip`` is dropped (with a warning) for ``root_weight=False``.
    ``roles``: the target-side and source-side projection names of the per-role layout."""
    dst, src = roles
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


def project_parts(layer, x_src: Tensor, x_dst: Optional[Tensor],
                  roles: Tuple[Tuple[str, ...], Tuple[str, ...]]) -> Parts:
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
    dst_names, src_names = roles
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
