"""Positional encodings: Laplacian eigenvectors (transform + encoder), sinusoidal 1-D/2-D, RWSE.

* :class:`AddLaplacianPE` -- transform storing the k non-trivial eigenvectors of the symmetric
  normalized Laplacian with the smallest eigenvalues (Dwivedi & Bresson 2020), padded and
  deterministic (PyG's ``AddLaplacianEigenvectorPE`` crashes for k >= N, draws a random sign
  once at preprocessing time and uses a random ARPACK start vector, PyG #7499).
* :class:`LapPEEncoder` -- maps the PE to features; flips eigenvector signs at random in every
  training forward pass (as GraphGPS does), or is sign invariant (SignNet-style phi(v)+phi(-v)).
* :func:`sinusoidal_pe` / :func:`sinusoidal_pe_2d` -- Transformer encodings for sequences/images.
* :class:`AddRandomWalkPE` -- random-walk return probabilities (RWSE), PyG's transform of the
  same name and signature rewritten (exact up to 4000 nodes, estimated above): PyG's (2.8)
  replaces every edge weight by the clamped inverse degree, so weighted graphs get wrong values, and its dense path (N <= 2000) counts a
  duplicated edge once where its sparse path counts it twice; it also squares sparse
  matrices, which fills in on large social graphs (see
  :func:`graphattn.data.structural.random_walk_pe`, which this calls).
"""
from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.transforms.add_positional_encoding import add_node_attr

from graphattn.data.structural import random_walk_pe
from graphattn.functional import check_all_finite
from graphattn.ops.padding import check_batch
from graphattn.ops.spectral import component_eigs, fix_sign
from graphattn.utils.validation import check_dtype, check_edge_index, check_int

__all__ = ["AddLaplacianPE", "LapPEEncoder", "AddRandomWalkPE", "pe_inputs", "sinusoidal_pe",
           "sinusoidal_pe_2d"]


def _check_float_dtype(dtype) -> None:
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype (sin/cos values in [-1, 1]), got {dtype!r}")


class AddLaplacianPE(BaseTransform):
    r"""Laplacian eigenvector positional encoding ("Benchmarking GNNs", Dwivedi et al. 2020).

    With :math:`L = I - D^{-1/2} A D^{-1/2}` (self-loops removed; :math:`A \leftarrow
    \max(A, A^T)` unless ``is_undirected``; an isolated node has :math:`L_{ii} = 0`, Chung's
    convention), stores the eigenvectors of the ``k`` smallest *non-trivial* eigenvalues.

    Conventions (all deterministic: the same graph gives the same bits on every call):

    * **Trivial eigenvectors**: the null space of :math:`L` has one dimension per connected
      component, so the spectrum is computed per component and the first eigenpair of each
      (eigenvalue 0) is dropped; the ``k`` smallest remaining eigenvalues over all components
      are kept (ties by component order). Entries outside a vector's component are 0, so an
      isolated node gets an all-zero (finite) row.
    * **Padding**: a graph with fewer than ``k`` non-trivial eigenpairs (e.g. ``N <= k``) gets
      zero columns at the end, with the eigenvalue 0 and the mask ``False`` there.
    * **Sign**: each eigenvector is flipped so that its entry of largest magnitude (first
      index among near-ties) is positive. Random flipping belongs to :class:`LapPEEncoder`.
    * **Solver**: components with ``<= dense_threshold`` nodes use dense ``numpy.linalg.eigh``;
      larger ones ``scipy.sparse.linalg.eigsh`` with a fixed start vector (Lanczos; shift-invert
      for band-like graphs where Lanczos stalls, e.g. long paths). For a repeated
      eigenvalue the basis of its eigenspace is the solver's (fixed for a fixed solver).

    Use it as a ``pre_transform`` to compute the decomposition once per dataset.

    Args:
        k (int): number of eigenvectors K.
        attr_name (str): attribute for the eigenvectors. (default: ``"lap_pe"``)
        eigval_attr_name (str, optional): attribute for the eigenvalues, broadcast per node so
            that batching concatenates them; ``None`` to skip. (default: ``"lap_eigval"``)
        mask_attr_name (str, optional): attribute for the mask; ``None`` to skip.
            (default: ``"lap_pe_mask"``)
        is_undirected (bool): the edges already come in both directions with equal weights:
            ``A`` is not symmetrised but checked (a ``ValueError`` otherwise). (default: ``False``)
        dense_threshold (int): largest component solved densely. (default: ``300``)

    Shapes:
        adds ``lap_pe`` ``(N, K)`` float32, ``lap_eigval`` ``(N, K)`` float32 (every row equal),
        ``lap_pe_mask`` ``(N, K)`` bool (False in padded columns). ``data.edge_weight``
        ``(E,)``, if present, weights the edges (duplicates summed; must be finite and
        non-negative); otherwise ``A`` is binary. ``edge_index`` ids must lie in ``[0, N)``.
    """

    def __init__(self, k: int, attr_name: str = "lap_pe", eigval_attr_name: Optional[str] = "lap_eigval",
                 mask_attr_name: Optional[str] = "lap_pe_mask", is_undirected: bool = False,
                 dense_threshold: int = 300) -> None:
        if not isinstance(attr_name, str):
            raise ValueError(f"attr_name must be a str, got {attr_name!r}")
        self.k = check_int("k", k, 1)
        self.attr_name = attr_name
        self.eigval_attr_name = eigval_attr_name
        self.mask_attr_name = mask_attr_name
        self.is_undirected = is_undirected
        self.dense_threshold = check_int("dense_threshold", dense_threshold, 0)

    def _adjacency(self, data: Data, num_nodes: int):
        import scipy.sparse as sp  # scipy: only for Laplacian PEs, not on `import graphattn`

        src, dst = data.edge_index.detach().cpu().numpy()
        weight = getattr(data, "edge_weight", None)
        w = np.ones(src.shape[0]) if weight is None else weight.detach().cpu().double().numpy().reshape(-1)
        if w.shape[0] != src.shape[0]:
            raise ValueError(f"edge_weight must have shape ({src.shape[0]},), got {tuple(weight.shape)}")
        if not np.isfinite(w).all():
            bad = int((~np.isfinite(w)).sum())
            raise ValueError(f"edge_weight contains NaN or inf values ({bad} of {w.shape[0]} edges): "
                             "the Laplacian PE needs finite, non-negative weights")
        if (w < 0).any():
            raise ValueError(f"edge_weight must be non-negative for a Laplacian PE (min {w.min():g})")
        keep = src != dst  # self-loops do not change the graph's geometry
        adj = sp.coo_matrix((w[keep], (dst[keep], src[keep])), shape=(num_nodes, num_nodes)).tocsr()
        adj.sum_duplicates()
        if weight is None:
            adj.data[:] = 1.0
        if not self.is_undirected:
            adj = adj.maximum(adj.T).tocsr()
        elif (abs(adj - adj.T) > 1e-12 * max(1.0, float(np.abs(adj.data).max(initial=0.0)))).nnz:
            raise ValueError("AddLaplacianPE(is_undirected=True) got a graph whose edges (or edge weights) are "
                             "not symmetric: add the reverse edges (torch_geometric.utils.to_undirected) or "
                             "use is_undirected=False, which symmetrises A <- max(A, A^T)")
        adj.eliminate_zeros()
        return adj

    def forward(self, data: Data) -> Data:
        num_nodes, k, edge_index = data.num_nodes, self.k, data.edge_index
        if num_nodes is None:
            raise ValueError("AddLaplacianPE needs data.num_nodes (or data.x) to be known")
        if edge_index is not None:
            check_edge_index(edge_index, num_nodes, name="data.edge_index")
        pe, eigval, found = np.zeros((num_nodes, k)), np.zeros(k), 0
        if num_nodes > 1 and edge_index is not None and edge_index.numel() > 0:
            from scipy.sparse.csgraph import connected_components  # scipy: only for Laplacian PEs

            adj = self._adjacency(data, num_nodes)
            num_comp, labels = connected_components(adj, directed=False)
            members = np.split(np.argsort(labels, kind="stable"),
                               np.cumsum(np.bincount(labels, minlength=num_comp))[:-1])
            vals, cols = [np.zeros(0)], []  # candidate eigenpairs: value, (node ids, vector)
            for nodes in (m for m in members if m.shape[0] > 1):  # isolated nodes: no pairs
                v, vec = component_eigs(adj[nodes][:, nodes], min(k, nodes.shape[0] - 1),
                                         self.dense_threshold)
                vals.append(v)
                cols.extend((nodes, vec[:, j]) for j in range(vec.shape[1]))
            all_vals = np.concatenate(vals)
            chosen = np.argsort(all_vals, kind="stable")[:k]  # the k smallest over all components
            for c, idx in enumerate(chosen):
                pe[cols[idx][0], c], eigval[c] = cols[idx][1], all_vals[idx]
            found = chosen.shape[0]
            pe[:, :found] = fix_sign(pe[:, :found])
        device = edge_index.device if edge_index is not None else None
        data[self.attr_name] = torch.from_numpy(pe).to(device, torch.float32)
        if self.eigval_attr_name is not None:
            per_node = np.tile(eigval, (num_nodes, 1))  # (N, K): batching concatenates rows
            data[self.eigval_attr_name] = torch.from_numpy(per_node).to(device, torch.float32)
        if self.mask_attr_name is not None:
            data[self.mask_attr_name] = torch.arange(k, device=device).lt(found).repeat(num_nodes, 1)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(k={self.k})"


def pe_inputs(data) -> Dict[str, Optional[Tensor]]:
    """The Laplacian PE attributes :class:`AddLaplacianPE` stores on ``data`` (``lap_pe``,
    ``lap_eigval``, ``lap_pe_mask``; None where absent) as the model keyword arguments ``pe``,
    ``pe_eigvals`` and ``pe_mask`` (see :meth:`graphattn.GraphTransformer.forward`); without
    ``lap_pe``, the random-walk encoding of :class:`AddRandomWalkPE` (``random_walk_pe``) as
    ``pe`` (a model built with ``pe_kind="linear"`` reads it)."""
    lap = getattr(data, "lap_pe", None)
    if lap is None:
        return {"pe": getattr(data, "random_walk_pe", None), "pe_eigvals": None, "pe_mask": None}
    return {"pe": lap, "pe_eigvals": getattr(data, "lap_eigval", None),
            "pe_mask": getattr(data, "lap_pe_mask", None)}


class AddRandomWalkPE(BaseTransform):
    r"""Random-walk structural encoding (Dwivedi et al. 2022): the return probabilities
    :math:`[P^k]_{ii}`, k = 1..``walk_length``, with :math:`P = D^{-1} A`.

    PyG's ``AddRandomWalkPE`` with the same arguments and output format, computed by
    :func:`graphattn.data.structural.random_walk_pe` instead (see the module doc for what is
    wrong with PyG's): ``data.edge_weight`` ``(E,)``, if present, weights ``A`` (finite, >= 0;
    ``D`` = weighted out-degree); a duplicated edge counts with its multiplicity, a directed edge
    j -> i (``edge_index[:, e] = (j, i)``) only in row j; isolated nodes get zeros.

    Values: **exact** for graphs of up to ``exact_max_nodes`` nodes (equal to PyG's on unweighted
    graphs without duplicate edges), at O(N²) memory. Above, k = 1, 2 (and 3 within a budget)
    stay exact and the rest are a seeded Monte-Carlo **estimate** with ``num_probes`` probes
    (relative error ~ sqrt(2 / num_probes), ~18 % at 64; small odd-k values of directed graphs
    are noisier), clamped to [0, 1] — what a structural encoding of a large social graph
    needs; raise ``exact_max_nodes`` for exact values when N² floats fit in memory.

    Args:
        walk_length (int): number of steps K.
        attr_name (str, optional): attribute for the ``(N, K)`` float32 encoding; ``None``
            concatenates it to ``data.x``. (default: ``"random_walk_pe"``)
        exact_max_nodes (int): largest graph computed exactly. (default: ``4000``)
        num_probes (int): Monte-Carlo probes above it. (default: ``64``)
        seed (int): seed of the probes (the same graph gives the same estimate). (default: ``0``)
    """

    def __init__(self, walk_length: int, attr_name: Optional[str] = "random_walk_pe", *,
                 exact_max_nodes: int = 4000, num_probes: int = 64, seed: int = 0) -> None:
        self.walk_length = check_int("walk_length", walk_length, 1)
        self.attr_name = attr_name
        self.exact_max_nodes = check_int("exact_max_nodes", exact_max_nodes, 0)
        self.num_probes = check_int("num_probes", num_probes, 1)
        self.seed = int(seed)

    def forward(self, data: Data) -> Data:
        n, edge_index = data.num_nodes, data.edge_index
        if n is None:
            raise ValueError("AddRandomWalkPE needs data.num_nodes (or data.x) to be known")
        if edge_index is None:
            edge_index = torch.zeros(2, 0, dtype=torch.long)
        check_edge_index(edge_index, n, name="data.edge_index")
        weight = getattr(data, "edge_weight", None)
        pe = random_walk_pe(edge_index.cpu(), n, self.walk_length, exact_max_nodes=self.exact_max_nodes,
                            num_probes=self.num_probes, seed=self.seed,
                            edge_weight=None if weight is None else weight.cpu())
        return add_node_attr(data, pe.to(edge_index.device), attr_name=self.attr_name)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.walk_length})"


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
