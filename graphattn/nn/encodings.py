"""Positional-encoding encoders: Laplacian eigenvectors, sinusoidal 1-D/2-D. The transforms that
compute encodings on graphs (:class:`~graphattn.transforms.AddLaplacianPE`,
:class:`~graphattn.transforms.AddRandomWalkPE`) are in :mod:`graphattn.transforms`.

* :class:`LapPEEncoder` -- maps the PE to features; flips eigenvector signs at random in every
  training forward pass (as GraphGPS does), or is sign invariant (SignNet-style phi(v)+phi(-v)).
* :func:`sinusoidal_pe` / :func:`sinusoidal_pe_2d` -- Transformer encodings for sequences/images.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn

from graphattn.functional import check_all_finite
from graphattn.ops.padding import check_batch
from graphattn.transforms.positional import AddLaplacianPE, AddRandomWalkPE  # noqa: F401  (moved there)
from graphattn.utils.validation import check_dtype, check_int

__all__ = ["LapPEEncoder", "pe_inputs", "sinusoidal_pe",
           "sinusoidal_pe_2d"]


def _check_float_dtype(dtype) -> None:
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype (sin/cos values in [-1, 1]), got {dtype!r}")


def pe_inputs(data) -> Dict[str, Optional[Tensor]]:
    """The Laplacian PE attributes :class:`AddLaplacianPE` stores on ``data`` (``lap_pe``,
    ``lap_eigval``, ``lap_pe_mask``; None where absent) as the model keyword arguments ``pe``,
    ``pe_eigvals`` and ``pe_mask`` (see :meth:`graphattn.GraphTransformer.forward`); without
    ``lap_pe``, the random-walk encoding of :class:`AddRandomWalkPE` (``random_walk_pe``) as
    ``pe`` (a model built with ``pe_kind="linear"`` reads it), or else the diagonal of
    :class:`~graphattn.transforms.AddRRWP` (``rrwp``). ``AddRRWP``'s per-edge vectors (``edge_rrwp``)
    come as ``edge_pe`` (only when present: models without ``edge_pe_dim`` take no such argument)."""
    pair = getattr(data, "edge_rrwp", None)
    extra = {} if pair is None else {"edge_pe": pair}
    lap = getattr(data, "lap_pe", None)
    if lap is None:
        node = getattr(data, "random_walk_pe", None)
        return {"pe": getattr(data, "rrwp", None) if node is None else node, "pe_eigvals": None, "pe_mask": None,
                **extra}
    return {"pe": lap, "pe_eigvals": getattr(data, "lap_eigval", None),
            "pe_mask": getattr(data, "lap_pe_mask", None), **extra}


class LapPEEncoder(nn.Module):
    r"""Learned encoder of Laplacian PEs (Dwivedi & Bresson 2020; SignNet, Lim et al. 2022).

    Every column j (eigenvector) of node i is embedded by a shared MLP
    :math:`\phi([v_{ij}, \lambda_j]) \in \mathbb{R}^{C_h}`, padded columns are zeroed, and the
    K embeddings are concatenated and projected: :math:`\rho(\Vert_j\, m_{ij}\phi_{ij})`.
    Eigenvector signs are arbitrary, so in training mode each column's sign is flipped at
    random on every forward pass (independently per graph when ``batch`` is given); in eval
    mode never. With ``sign_invariant=True``, :math:`\phi(v)+\phi(-v)` is used instead and
    nothing is flipped.

    Args:
        k (int): PE dimension K.
        out_channels (int): output channels.
        hidden_channels (int, optional): width C_h of phi. (default: ``out_channels``)
        sign_invariant (bool): use phi(v) + phi(-v). (default: ``False``)
        use_eigvals (bool): feed the eigenvalue next to each entry. (default: ``True``)

    Shapes:
        pe ``(N, K)``, eigvals ``(N, K)`` (read as zeros if omitted: pass them when
        ``use_eigvals``), mask ``(N, K)`` bool (optional; NaN entries in masked columns are
        fine), batch ``(N,)`` -> ``(N, out_channels)``. ``num_graphs`` (optional forward
        argument): B, saves reading ``batch.max()`` for the per-graph sign flips.
    """

    def __init__(self, k: int, out_channels: int, hidden_channels: Optional[int] = None,
                 sign_invariant: bool = False, use_eigvals: bool = True) -> None:
        super().__init__()
        self.k = check_int("k", k, 1)
        self.out_channels = check_int("out_channels", out_channels, 1)
        self.hidden_channels = (self.out_channels if hidden_channels is None
                                else check_int("hidden_channels", hidden_channels, 1))
        self.sign_invariant = sign_invariant
        self.use_eigvals = use_eigvals
        in_per_column = 2 if use_eigvals else 1
        self.phi = nn.Sequential(nn.Linear(in_per_column, self.hidden_channels), nn.ReLU(),
                                 nn.Linear(self.hidden_channels, self.hidden_channels))
        self.rho = nn.Linear(k * self.hidden_channels, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in (self.phi[0], self.phi[2], self.rho):
            layer.reset_parameters()

    def _check(self, name: str, t: Optional[Tensor], n: int) -> None:
        if t is not None and tuple(t.shape) != (n, self.k):
            raise ValueError(f"{name} must have shape ({n}, {self.k}) (N, K), got {tuple(t.shape)}")

    def forward(self, pe: Tensor, eigvals: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, num_graphs: Optional[int] = None,
                check_range: bool = True, check_values: bool = True) -> Tensor:
        """``check_range=False``: ``batch`` was range-checked against ``num_graphs`` by the
        caller (a model's forward), so the sign flips skip that scan. ``check_values=False``:
        the caller checks for NaN/inf itself (a model checks the encoder's output once)."""
        if not isinstance(pe, Tensor) or pe.dim() != 2 or pe.size(1) != self.k:
            got = tuple(pe.shape) if isinstance(pe, Tensor) else type(pe).__name__
            raise ValueError(f"pe must have shape (N, {self.k}) (N, K), got {got}")
        n = pe.size(0)
        check_dtype(pe, self.rho.weight.dtype, "pe", "the LapPE encoder")
        self._check("eigvals", eigvals, n)
        self._check("mask", mask, n)
        if batch is not None:
            check_batch(batch, n, num_graphs, check_range=False)  # type and shape
            batch = batch.long()  # uint8 ids would index as a boolean mask
        if mask is not None:
            mask = mask.bool()
            pe = torch.where(mask, pe, torch.zeros_like(pe))  # also clears NaN padding
        if check_values:  # NaN/inf in the used (unmasked) entries; a model checks its own inputs
            if eigvals is not None and mask is not None:
                eigvals = torch.where(mask, eigvals, torch.zeros_like(eigvals))
            check_all_finite([("pe", pe, False), ("eigvals", eigvals, False)])
        if self.training and not self.sign_invariant:
            if batch is None:  # one graph: one sign per eigenvector
                num_graphs = 1
            elif num_graphs is None or check_range:  # known B (checked) saves a device sync
                num_graphs = check_batch(batch, n, num_graphs)
            num_graphs = max(int(num_graphs), 1)
            sign = torch.randint(0, 2, (num_graphs, self.k), device=pe.device).to(pe.dtype) * 2 - 1
            pe = pe * (sign[batch] if batch is not None else sign)  # (N, K)
        feats = [pe.unsqueeze(-1)]  # (N, K, 1)
        if self.use_eigvals:
            lam = torch.zeros_like(pe) if eigvals is None else eigvals
            lam = lam if mask is None else torch.where(mask, lam, torch.zeros_like(lam))
            feats.append(lam.unsqueeze(-1).to(pe.dtype))
        h = torch.cat(feats, dim=-1)  # (N, K, 1 or 2)
        out = self.phi(h)  # (N, K, C_h)
        if self.sign_invariant:
            out = out + self.phi(torch.cat([-h[..., :1], h[..., 1:]], dim=-1))
        if mask is not None:
            out = out * mask.unsqueeze(-1).to(out.dtype)  # padded columns contribute nothing
        return self.rho(out.reshape(n, self.k * self.hidden_channels))  # (N, out_channels)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.k}, {self.out_channels}, "
                f"sign_invariant={self.sign_invariant})")


def _int_or_none(value, minimum: int):
    """``value`` as an int >= ``minimum`` (Python / numpy ints, 0-d integer tensors), else None."""
    try:
        return check_int("value", value, minimum)
    except ValueError:
        return None


#: the largest sinusoidal encoding built (entries): 2^31 float64 entries are 16 GiB, ~4x that at peak
MAX_PE_ELEMENTS = 2 ** 31


def sinusoidal_pe(length: int, channels: int, base: float = 10000.0, *,
                  dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    r"""Transformer sinusoidal encoding ("Attention Is All You Need", Vaswani et al. 2017).

    :math:`PE_{p,2i} = \sin(p / b^{2i/C})`, :math:`PE_{p,2i+1} = \cos(p / b^{2i/C})`.

    Shapes: returns ``(length, channels)``; ``channels`` must be even.
    """
    length = check_int("length", length, 0)
    _check_float_dtype(dtype)
    c = _int_or_none(channels, 2)
    if c is None or c % 2:
        raise ValueError(f"channels must be a positive even int, got {channels!r}")
    channels = c
    try:
        b = None if isinstance(base, (bool, str, bytes)) else float(base)  # numbers, 0-d tensors, Decimal
    except (TypeError, ValueError):
        b = None
    if b is None or not (b > 0 and math.isfinite(b)):
        raise ValueError(f"base must be a finite number > 0, got {base!r}")
    base = b
    if length * channels > MAX_PE_ELEMENTS:
        raise ValueError(f"a sinusoidal encoding of {length:,} positions x {channels} channels has "
                         f"{length * channels:,} entries, more than graphattn.nn.encodings.MAX_PE_ELEMENTS = "
                         f"{MAX_PE_ELEMENTS:,} (built in float64: 8 bytes per entry, about 4 times that at peak)")
    pos = torch.arange(length, dtype=torch.float64, device=device).unsqueeze(1)  # (L, 1)
    freq = torch.exp(torch.arange(0, channels, 2, dtype=torch.float64, device=device)
                     * (-math.log(base) / channels))  # (C/2,)
    pe = torch.empty(length, channels, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe.to(dtype)


def sinusoidal_pe_2d(height: int, width: int, channels: int, base: float = 10000.0, *,
                     dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    r"""2-D sinusoidal encoding for an image grid (as in MAE / ViT variants).

    The first ``channels / 2`` channels are :func:`sinusoidal_pe` of the row, the rest of the
    column. Nodes are in row-major order: node ``r * width + c`` is pixel ``(r, c)``.

    Shapes: returns ``(height * width, channels)``; ``channels`` must be divisible by 4.
    """
    c = _int_or_none(channels, 4)
    if c is None or c % 4:
        raise ValueError(f"channels must be a positive multiple of 4 (half row, half column, each "
                         f"even), got {channels!r}")
    channels = c
    height, width = check_int("height", height, 0), check_int("width", width, 0)
    if height * width * channels > MAX_PE_ELEMENTS:
        raise ValueError(f"a 2-D sinusoidal encoding of {height:,} x {width:,} positions x {channels} channels "
                         f"has {height * width * channels:,} entries, more than "
                         f"graphattn.nn.encodings.MAX_PE_ELEMENTS = {MAX_PE_ELEMENTS:,}")
    _check_float_dtype(dtype)
    half = channels // 2
    rows = sinusoidal_pe(height, half, base, dtype=dtype, device=device)  # (H, C/2)
    cols = sinusoidal_pe(width, half, base, dtype=dtype, device=device)  # (W, C/2)
    return torch.cat([rows.repeat_interleave(width, dim=0), cols.repeat(height, 1)], dim=1)
