"""Sequences and images as graphs: full, window, stride, global, causal and grid attention.

Self-attention over a sequence is attention on a graph whose edges say which tokens may look
at which: "full" is the complete graph, "window" truncated attention (|i - j| <= w),
"stride" strided attention (|i - j| a multiple of s), "global" a few tokens that see and are
seen by all (Longformer / BigBird combine these). Images are grids of pixels or of P x P
patches (ViT); "grid" attention is a CNN-like k x k receptive field.

Conventions for every ``edge_index`` built here: shape ``(2, E)``, row 0 = source j, row 1 =
target i (i attends to j, as in PyG's message passing); self-loops i -> i always included;
no duplicate edges; sorted by (target, source). Construction is vectorised, O(E) memory.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from graphattn.nn.encodings import sinusoidal_pe, sinusoidal_pe_2d
from graphattn.utils.validation import check_int

__all__ = ["SEQUENCE_PATTERNS", "IMAGE_PATTERNS", "sequence_graph", "image_graph",
           "sequences_to_batch", "images_to_batch"]

SEQUENCE_PATTERNS = ("full", "window", "stride", "global", "causal")
IMAGE_PATTERNS = ("full", "grid")
PatternArg = Union[str, Sequence[str]]


#: the largest pattern built (edges): the int64 edge_index alone takes 16 bytes per edge (32 GiB here),
#: and its construction about as much again; raise it (graphattn.patterns.MAX_EDGES = ...) on purpose
MAX_EDGES = 2 ** 31


def _ragged(counts: Tensor, what: str = "the pattern"):
    """For per-target edge counts ``(n,)``: each edge's target and its rank among them.
    A ``ValueError`` naming ``what`` when the total exceeds :data:`MAX_EDGES` (checked before
    anything of that size is allocated)."""
    total = int(counts.sum()) if counts.numel() else 0
    if total > MAX_EDGES:
        raise ValueError(f"{what} needs {total:,} edges ({16 * total / 2**30:,.1f} GiB as an int64 edge_index), "
                         f"more than graphattn.patterns.MAX_EDGES = {MAX_EDGES:,}: use a sparser pattern "
                         "(window, stride, global, grid) or a shorter input")
    target = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    start = torch.cumsum(counts, 0) - counts  # (n,) first edge of each target
    offset = torch.arange(target.numel(), device=counts.device) - start[target]
    return target, offset


def _parse_patterns(pattern: PatternArg, valid: Sequence[str]) -> List[str]:
    pats = [pattern] if isinstance(pattern, str) else None
    if isinstance(pattern, (list, tuple)):
        pats = list(pattern)
    if not pats or any(not isinstance(p, str) or p not in valid for p in pats):
        raise ValueError(f"pattern must be one of {list(valid)} or a non-empty list of them, "
                         f"got {pattern!r}")
    return list(dict.fromkeys(pats))


def _one_pattern(name: str, length: int, window, stride, num_global, device, causal: bool = False):
    """(target, source) of one pattern, sorted by (target, source); ``causal``: only j <= i,
    built directly (the size limit applies to the causal pattern, not to the two-sided one)."""
    i = torch.arange(length, device=device)
    what = f"pattern {name!r}{' (causal)' if causal and name != 'causal' else ''} on {length:,} tokens"
    if name == "full" and not causal:
        return _ragged(torch.full((length,), length, device=device), what)  # source = rank
    if name in ("causal", "full"):  # j <= i
        return _ragged(i + 1, what)
    if name == "window":  # |i - j| <= window
        window = min(window, length)  # wider changes nothing (and would overflow int64 below)
        start = (i - window).clamp(min=0)
        counts = (i if causal else (i + window).clamp(max=length - 1)) - start + 1
        target, off = _ragged(counts, what)
        return target, start[target] + off
    if name == "stride":  # j = i mod stride + stride * t
        stride = min(stride, max(length, 1))
        r = i % stride
        last = i if causal else torch.full_like(i, length - 1)  # the largest j
        target, off = _ragged((last - r) // stride + 1, what)
        return target, r[target] + stride * off
    # "global": the first g tokens see everyone; the others see the g tokens and themselves.
    # causal: the first g tokens see only those before them
    g = min(num_global, length)
    target, off = _ragged(torch.where(i < g, i + 1 if causal else length, g + 1), what)
    return target, torch.where((target >= g) & (off == g), target, off)


def sequence_graph(length: int, pattern: PatternArg = "full", window: Optional[int] = None,
                   stride: Optional[int] = None, num_global: int = 0, *, causal: bool = False,
                   device=None) -> Tensor:
    r"""Attention pattern over a sequence of ``length`` tokens as an ``edge_index``.

    Args:
        length (int): number of tokens L.
        pattern (str or list of str): ``"full"`` (all pairs, L^2 edges), ``"window"``
            (:math:`|i-j| \le` ``window``), ``"stride"`` (:math:`|i-j|` a multiple of
            ``stride``), ``"global"`` (the first ``num_global`` tokens attend to all and are
            attended by all; a longer count than L makes every token global), ``"causal"``
            (:math:`j \le i`), or a list of them: the union of their edges (so "causal" in a
            list is no longer causal).
        window (int, optional): half-width, ``>= 0``; required by (and only for) "window".
        stride (int, optional): ``>= 1``; required by (and only for) "stride".
        num_global (int): ``>= 1`` for "global"; must stay 0 otherwise.
        causal (bool): keep only the edges with :math:`j \le i` of the pattern (or union):
            ``pattern="window", causal=True`` is a causal sliding window (each token attends
            to itself and the ``window`` tokens before it); with "global" the global tokens
            still attend to everything before them only.

    Shapes: returns ``(2, E)`` int64; row 0 = source j, row 1 = target i; sorted by (i, j).
    """
    length = check_int("length", length, 0)
    pats = _parse_patterns(pattern, SEQUENCE_PATTERNS)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    params = {}
    for name, value, minimum in (("window", window, 0), ("stride", stride, 1), ("num_global", num_global, 1)):
        needed, unused = ("global", 0) if name == "num_global" else (name, None)
        if needed in pats:
            if value is None:
                raise ValueError(f"pattern {needed!r} needs {name}=int >= {minimum}")
            params[name] = check_int(name, value, minimum)
        elif value is not None and value != unused:
            raise ValueError(f"{name}={value!r} is only used by pattern {needed!r}, got pattern {pattern!r}")
    parts = [_one_pattern(p, length, params.get("window"), params.get("stride"), params.get("num_global"),
                          device, causal) for p in pats]
    if len(parts) == 1:
        target, source = parts[0]
    else:  # union: dedupe on the key target * L + source, which also sorts by (target, source)
        _ragged(torch.tensor([sum(t.numel() for t, _ in parts)]), f"the union of patterns {pats} on "
                f"{length:,} tokens")  # the concatenation below holds them all at once
        key = torch.unique(torch.cat([t * length + s for t, s in parts]))
        target, source = key // length, key % length
    return torch.stack([source, target]).long()


def image_graph(height: int, width: int, pattern: str = "full", kernel_size: int = 3,
                patch_size: Optional[int] = None, *, device=None) -> Tensor:
    r"""Attention pattern over an image (pixels or ViT patches) as an ``edge_index``.

    Nodes are pixels in row-major order (node ``r * width + c`` is pixel ``(r, c)``), or,
    with ``patch_size=P``, the ``(height/P) x (width/P)`` patches in row-major order.

    Args:
        height, width (int): image size.
        pattern (str): ``"full"`` (every node attends to every node) or ``"grid"`` (node
            (r, c) attends to the nodes of its ``kernel_size x kernel_size`` window centred at
            (r, c), clipped at the borders, like a convolution's receptive field).
        kernel_size (int): odd window size for "grid". (default: ``3``)
        patch_size (int, optional): P; must divide ``height`` and ``width``.

    Shapes: returns ``(2, E)`` int64; row 0 = source, row 1 = target; sorted by (target, source).
    """
    height, width = check_int("height", height, 0), check_int("width", width, 0)
    if not isinstance(pattern, str) or pattern not in IMAGE_PATTERNS:
        raise ValueError(f"pattern must be one of {list(IMAGE_PATTERNS)}, got {pattern!r}")
    if patch_size is not None:
        p = check_int("patch_size", patch_size, 1)
        if height % p or width % p:
            raise ValueError(f"patch_size={p} must divide height={height} and width={width}")
        height, width = height // p, width // p
    check_int("kernel_size", kernel_size, 1)  # a positive int for every pattern (unused by "full")
    if pattern == "full":
        n = height * width
        if n * n > MAX_EDGES:  # sequence_graph's own message would speak of tokens
            raise ValueError(f"pattern 'full' on {n:,} {'patches' if patch_size else 'pixels'} ({height}x{width}) "
                             f"needs {n * n:,} edges, more than graphattn.patterns.MAX_EDGES = {MAX_EDGES:,}: use "
                             "pattern='grid', a larger patch_size or a smaller image")
        return sequence_graph(n, "full", device=device)
    if kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be odd (a window centred on the pixel), got {kernel_size}")
    rad = min(kernel_size // 2, max(height, width))  # a wider window changes nothing (nor overflows)
    node = torch.arange(height * width, device=device)
    r, c = node // width, node % width
    r0, c0 = (r - rad).clamp(min=0), (c - rad).clamp(min=0)
    nr = (r + rad).clamp(max=height - 1) - r0 + 1  # rows in the clipped window
    nc = (c + rad).clamp(max=width - 1) - c0 + 1  # columns in the clipped window
    target, off = _ragged(nr * nc, f"pattern 'grid' (kernel {kernel_size}) on a {height} x {width} grid")
    source = (r0[target] + off // nc[target]) * width + c0[target] + off % nc[target]
    return torch.stack([source, target]).long()


def _pe_channels(pe_channels: Optional[int], feature_dim: int, multiple: int, kind: str) -> int:
    if pe_channels is None:  # the feature size, rounded up to what the encoding needs (RGB: 3 -> 4)
        return max(multiple, -(-int(feature_dim) // multiple) * multiple)
    channels = check_int("pe_channels", pe_channels, 1)
    if channels < multiple or channels % multiple:
        raise ValueError(f"{kind} encodings need pe_channels divisible by {multiple}, got {channels}")
    return channels


def sequences_to_batch(x: Union[Tensor, Sequence[Tensor]], pattern: PatternArg = "full",
                       pe: Optional[str] = "sinusoidal", pe_channels: Optional[int] = None,
                       **pattern_kwargs) -> Batch:
    r"""A batch of sequences as one PyG :class:`~torch_geometric.data.Batch` of pattern graphs.

    Args:
        x (Tensor or list of Tensor): ``(B, L, F)``, or B tensors ``(L_b, F)`` of any lengths.
        pattern: see :func:`sequence_graph`; ``**pattern_kwargs`` (window, stride,
            num_global) are passed on.
        pe (str, optional): ``"sinusoidal"`` to attach :func:`sinusoidal_pe` as ``pe``, or None.
        pe_channels (int, optional): its size (even). (default: F, rounded up to even)

    Shapes: ``x`` ``(N, F)``, ``edge_index`` ``(2, E)`` (one graph per sequence, never
    connected to another), ``batch`` ``(N,)``, ``ptr`` ``(B + 1,)``, ``pos`` ``(N,)`` the
    token position, ``pe`` ``(N, pe_channels)`` if requested.
    """
    if isinstance(x, Tensor):
        if x.dim() != 3:
            raise ValueError(f"x must have shape (B, L, F), got {tuple(x.shape)}")
        seqs = list(x.unbind(0))
    elif isinstance(x, (list, tuple)) and all(isinstance(s, Tensor) and s.dim() == 2 for s in x):
        seqs = list(x)
    else:
        raise TypeError("x must be a (B, L, F) tensor or a list of (L_b, F) tensors")
    if not seqs:
        raise ValueError("x holds no sequences (B = 0)")
    if "device" in pattern_kwargs:
        raise TypeError("sequences_to_batch takes no device argument: the batch is built on x's device "
                        "(move x first, or call .to(device) on the result)")
    dims = {s.size(1) for s in seqs}
    if len(dims) != 1:
        raise ValueError(f"all sequences must have the same feature size F, got {sorted(dims)}")
    if pe not in ("sinusoidal", None):
        raise ValueError(f"pe must be one of ['sinusoidal', None], got {pe!r}")
    device = seqs[0].device
    table = None
    if pe is not None:
        channels = _pe_channels(pe_channels, dims.pop(), 2, "sinusoidal")
        dtype = seqs[0].dtype if seqs[0].is_floating_point() else torch.float32
        table = sinusoidal_pe(max(s.size(0) for s in seqs), channels, dtype=dtype, device=device)
    graphs: Dict[int, Tensor] = {}  # one edge_index per distinct length
    data_list = []
    for s in seqs:
        n = s.size(0)
        if n not in graphs:
            graphs[n] = sequence_graph(n, pattern, device=device, **pattern_kwargs)
        data = Data(x=s, edge_index=graphs[n], pos=torch.arange(n, device=device))
        if table is not None:
            data.pe = table[:n]
        data_list.append(data)
    return Batch.from_data_list(data_list)  # offsets edge_index per graph


def images_to_batch(images: Tensor, pattern: str = "grid", kernel_size: int = 3,
                    patch_size: Optional[int] = None, pe: Optional[str] = "sinusoidal2d",
                    pe_channels: Optional[int] = None) -> Batch:
    r"""A batch of images as one PyG :class:`~torch_geometric.data.Batch` of pixel/patch graphs.

    Node features are a pixel's C channel values, or with ``patch_size=P`` the flattened
    patch in (row-in-patch, column-in-patch, channel) order (P*P*C values).

    Args:
        images (Tensor): ``(B, C, H, W)``.
        pattern, kernel_size, patch_size: see :func:`image_graph`.
        pe (str, optional): ``"sinusoidal2d"`` to attach :func:`sinusoidal_pe_2d` as ``pe``.
        pe_channels (int, optional): its size (multiple of 4). (default: the feature size
            rounded up to a multiple of 4: 4 for RGB or grayscale pixels)

    Shapes: ``x`` ``(N, C)`` or ``(N, P*P*C)`` with N = B * nodes per image, ``edge_index``
    ``(2, E)``, ``batch`` ``(N,)``, ``ptr`` ``(B + 1,)``, ``pos`` ``(N, 2)`` the (row, col) of
    each node on its (pixel or patch) grid, ``pe`` ``(N, pe_channels)`` if requested.
    """
    if not isinstance(images, Tensor) or images.dim() != 4:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be a (B, C, H, W) tensor, got {shape}")
    if pe not in ("sinusoidal2d", None):
        raise ValueError(f"pe must be one of ['sinusoidal2d', None], got {pe!r}")
    b, c, h, w = images.shape
    if b == 0:  # as sequences_to_batch: a Batch of no graphs has no defined feature layout
        raise ValueError(f"images holds no images (B = 0), got shape {tuple(images.shape)}")
    edge_index = image_graph(h, w, pattern, kernel_size, patch_size, device=images.device)
    p = 1 if patch_size is None else int(patch_size)  # validated by image_graph
    gh, gw = h // p, w // p
    x = images.reshape(b, c, gh, p, gw, p).permute(0, 2, 4, 3, 5, 1)  # (B, H/P, W/P, P, P, C)
    x = x.reshape(b, gh * gw, p * p * c)  # (B, nodes, features)
    node = torch.arange(gh * gw, device=images.device)
    pos = torch.stack([node // gw, node % gw], dim=1)  # (nodes, 2) row-major
    table = None
    if pe is not None:
        channels = _pe_channels(pe_channels, p * p * c, 4, "2-D sinusoidal")
        dtype = images.dtype if images.is_floating_point() else torch.float32
        table = sinusoidal_pe_2d(gh, gw, channels, dtype=dtype, device=images.device)
    data_list = [Data(x=x[i], edge_index=edge_index, pos=pos) for i in range(b)]
    if table is not None:
        for data in data_list:
            data.pe = table
    return Batch.from_data_list(data_list)
