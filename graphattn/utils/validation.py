"""Cheap, vectorised input checks with messages that name the argument and the problem."""
from __future__ import annotations

import operator
from typing import Optional, Sequence

import torch
from torch import Tensor

from graphattn.utils.memo import forget_all, recall, remember

__all__ = ["check_bipartite_edge_index", "check_edge_index", "check_features", "check_int", "check_row_index",
           "check_tensor_shape", "mark_index_checked", "clear_checked_indices", "index_checked",
           "scans_values", "VALUE_CHECK_DEVICES"]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)

#: Devices whose tensors get the per-call NaN/inf scans (:func:`scans_values`): reading a CPU
#: tensor's values waits for no device. On other devices (CUDA) a scan would make every forward
#: wait for the GPU, so it runs only under ``torch.autograd.set_detect_anomaly(True)`` (or inside
#: ``torch.autograd.detect_anomaly()``), PyTorch's own switch for hunting NaNs. (Index checks of
#: ``edge_index`` / ``batch`` / row ids run on every device, once per tensor: see
#: :func:`mark_index_checked`.)
VALUE_CHECK_DEVICES = ("cpu",)


def scans_values(t: Optional[Tensor]) -> bool:
    """Whether a NaN/inf scan of ``t`` runs on this call: never under ``torch.compile`` (a
    data-dependent branch breaks the graph); for tensors on :data:`VALUE_CHECK_DEVICES` (the
    CPU); on any device while anomaly detection is on. A scan of a GPU tensor is a host read
    (a device synchronisation), so by default CUDA inputs are not scanned: a NaN there gives NaN
    outputs rather than a ``ValueError``, and ``torch.autograd.set_detect_anomaly(True)`` names it."""
    if t is None or torch.compiler.is_compiling():
        return False
    return t.device.type in VALUE_CHECK_DEVICES or torch.is_anomaly_enabled()


# Index tensors (edge_index, row ids) whose entries are known to lie in [0, bound): checked
# once, or built from checked parts; remembered per tensor by graphattn.utils.memo (identity,
# data pointer, in-place version counter, shape, device). A hit skips the aminmax scan and its
# device sync; an in-place edit changes the version, a freed tensor drops its entry.
def mark_index_checked(index: Tensor, bound: int) -> None:
    """Record that the integer tensor ``index`` (unchanged since) holds ids in ``[0, bound)``:
    later :func:`check_edge_index` (``bound`` = num_nodes) and :func:`check_row_index`
    (``bound`` = num_rows) calls on this tensor skip the range scan and its device sync. For
    tensors built from checked parts (e.g. a batch with global-token edges appended)."""
    if torch.compiler.is_compiling():  # nothing is remembered in a traced graph (graphattn.utils.memo)
        return
    remember(("index range", int(bound)), True, index)


def clear_checked_indices() -> None:
    """Forget every index tensor recorded by :func:`mark_index_checked` (and by the range scans
    of :func:`check_edge_index` / :func:`check_row_index`), and every other fact remembered per
    tensor (:mod:`graphattn.utils.memo`): the next check scans again. Needed only after writes
    that bypass PyTorch's version counter, see :func:`graphattn.ops.csr.clear_csr_cache`."""
    forget_all()


def index_checked(index: Tensor, bound: int) -> bool:
    """Whether ``index`` (this tensor, unchanged since) is known to hold ids in ``[0, bound)``."""
    return recall(("index range", int(bound)), index, default=False)


def check_int(name: str, value, minimum: int) -> int:
    """``value`` as a Python int (Python / numpy integers, 0-d integer tensors; not bool),
    else a ValueError naming ``name``; it must be ``>= minimum``. A traced size (``torch.SymInt``,
    under ``torch.export``) is returned as it is: reading it would fix the traced program to one size."""
    if isinstance(value, torch.SymInt):
        return value
    try:
        v = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        v = None
    if v is None or v < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return v


def check_edge_index(edge_index: Tensor, num_nodes: int, name: str = "edge_index",
                     check_range: bool = True) -> None:
    """``edge_index`` must be an integer ``(2, E)`` tensor with entries in ``[0, num_nodes)``.

    ``check_range=False`` checks only type and shape (the range check scans all edges; the
    layers run it once per graph, when its CSR view is built and cached). A tensor that passed
    the range check (unchanged since) is not scanned again, see :func:`mark_index_checked`.
    """
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (2, E), got {type(edge_index).__name__}")
    if edge_index.layout != torch.strided:
        raise TypeError(f"{name} is a sparse {edge_index.layout} tensor (an adjacency matrix?); pass the "
                        f"(2, E) index tensor instead: torch_geometric.utils.to_edge_index(adj)[0] for an "
                        f"adjacency with rows = sources, to_edge_index(adj_t)[0].flip(0) for PyG's transposed adj_t")
    if edge_index.dtype not in _INT_DTYPES:
        raise TypeError(f"{name} must have an integer dtype (torch.long), got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{name} must have shape (2, E), got {tuple(edge_index.shape)}")
    if (edge_index.numel() == 0 or not check_range or torch.compiler.is_compiling()  # value checks: eager only
            or index_checked(edge_index, num_nodes)):
        return
    lo, hi = torch.stack(torch.aminmax(edge_index)).tolist()  # one device sync
    if lo < 0:
        raise ValueError(f"{name} contains negative node indices (min {lo}; num_nodes={num_nodes}, "
                         f"valid indices are 0..{num_nodes - 1})")
    if hi >= num_nodes:
        raise ValueError(f"{name} refers to node {hi} but num_nodes={num_nodes} "
                         f"(valid indices are 0..{num_nodes - 1})")
    mark_index_checked(edge_index, num_nodes)


def check_bipartite_edge_index(edge_index: Tensor, num_src: int, num_dst: int,
                               name: str = "edge_index") -> None:
    """A bipartite ``edge_index`` (PyG's ``x=(x_src, x_dst)``): an integer ``(2, E)`` tensor whose
    row 0 holds source ids in ``[0, num_src)`` and row 1 target ids in ``[0, num_dst)``."""
    check_edge_index(edge_index, max(num_src, num_dst), name, check_range=False)
    if edge_index.numel() == 0 or torch.compiler.is_compiling():  # value checks: eager only
        return
    (slo, shi), (dlo, dhi) = torch.stack([torch.stack(torch.aminmax(r)) for r in edge_index]).tolist()
    for row, lo, hi, n, side in ((0, slo, shi, num_src, "sources (x_src)"),
                                 (1, dlo, dhi, num_dst, "targets (x_dst)")):
        if lo < 0:
            raise ValueError(f"{name}[{row}] contains negative node indices (min {lo}; {side} has {n} nodes)")
        if hi >= n:
            raise ValueError(f"{name}[{row}] refers to node {hi} but {side} has {n} nodes "
                             f"(valid indices are 0..{n - 1})")


def check_tensor_shape(t: Tensor, shape: Sequence[Optional[int]], name: str) -> None:
    """``t`` must be a tensor whose shape matches ``shape`` (``None`` = any size)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    ok = t.dim() == len(shape) and all(s is None or s == d for s, d in zip(shape, t.shape))
    if not ok:
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")


def check_row_index(index: Tensor, length: int, num_rows: int, name: str) -> None:
    """``index`` must be an integer ``(length,)`` tensor of row ids in ``[0, num_rows)``
    (the range scan is skipped for a tensor that passed it before, see :func:`mark_index_checked`)."""
    if not isinstance(index, Tensor) or index.dtype not in _INT_DTYPES:
        raise TypeError(f"{name} must be an integer tensor of shape ({length},), got "
                        f"{index.dtype if isinstance(index, Tensor) else type(index).__name__}")
    check_tensor_shape(index, (length,), name)
    if index.numel() and not torch.compiler.is_compiling() and not index_checked(index, num_rows):
        lo, hi = torch.stack(torch.aminmax(index)).tolist()  # one device sync
        if lo < 0 or hi >= num_rows:
            raise ValueError(f"{name} has row ids in [{lo}, {hi}] but the table has {num_rows} rows "
                             f"(valid ids are 0..{num_rows - 1})")
        mark_index_checked(index, num_rows)


_NOT_RECORDABLE = ("graphattn's layers and models cannot be recorded by torch.jit.trace (nor torch.jit.script): "
                   "they build and cache a CSR view of edge_index per graph; use torch.export.export (a deployable "
                   "program; graphattn export for a molecule checkpoint) or torch.compile instead")


def refuse_tracing() -> None:
    """``NotImplementedError`` under ``torch.jit.trace``: the layers build and cache a CSR view of
    ``edge_index`` per tensor (data-dependent, keyed on its storage), which it cannot record (it
    failed deep inside, ``unordered_map::at``). ``torch.export`` records the trace-safe path
    ``torch.compile`` takes (the view built inside the graph, nothing cached)."""
    if torch.jit.is_tracing():
        raise NotImplementedError(_NOT_RECORDABLE)


def refuse_scripting(*classes: type) -> None:
    """Give ``classes`` a ``__prepare_scriptable__`` that raises the same ``NotImplementedError``:
    ``torch.jit.script`` calls it on a module and on every submodule (a user's model holding one
    of ours too) before it compiles anything, so the user reads this instead of TorchScript's
    parser errors (keyword-only arguments, ``Optional`` unions, ...)."""
    def __prepare_scriptable__(self):
        raise NotImplementedError(_NOT_RECORDABLE)

    for cls in classes:
        cls.__prepare_scriptable__ = __prepare_scriptable__


def check_model_input(x) -> None:
    """``TypeError`` unless the model input ``x`` is a tensor (a dataset without node features
    gives ``x=None``: say how to add some, rather than an ``AttributeError`` deep inside); and
    :func:`refuse_tracing`."""
    refuse_tracing()
    if x is None:
        raise TypeError("x is None: the graphs have no node features; add some first, e.g. "
                        "torch_geometric.transforms.OneHotDegree(max_degree) / Constant() or "
                        "graphattn.data.add_structural_features(graphs)")
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor (N, F) of node features, got {type(x).__name__}")


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: no device argument
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def check_bias_dtype(bias: Optional[Tensor], name: str = "attn_bias") -> None:
    """TypeError unless ``bias`` (if given) is floating point: it is added to the scores, so a
    boolean keep-mask (SDPA's ``attn_mask`` convention) or integer codes would silently become
    additive 0/1 biases."""
    if bias is not None and not bias.is_floating_point():
        raise TypeError(f"{name} must be a floating-point additive score bias (-inf hides an edge), got "
                        f"{bias.dtype}" + (": for a keep-mask pass torch.zeros(mask.shape).masked_fill(~mask, "
                                           "float('-inf')), or drop the masked edges from edge_index"
                                           if bias.dtype == torch.bool else ""))


def check_dtype(t: Optional[Tensor], want: torch.dtype, name: str, owner: str = "the layer") -> None:
    """TypeError unless ``t`` (if given) has the floating dtype ``want`` of ``owner``'s weights
    (instead of matmul's "mat1 and mat2 must have the same dtype")."""
    if t is None or t.dtype == want:
        return
    if t.is_floating_point() and _autocast_on(t.device.type):
        return  # autocast casts both sides of every matmul
    if t.is_floating_point():
        raise TypeError(f"{name} has dtype {t.dtype} but {owner}'s weights are {want}: cast one to the other "
                        f"(.to({want}) on the input, or .to({t.dtype}) on the module)")
    raise TypeError(f"{name} must be a floating-point tensor of dtype {want}, got {t.dtype} "
                    "(categorical features need an embedding or one-hot encoding first)")


def check_features(x: Tensor, in_channels: int, name: str = "x", check_values: bool = True) -> None:
    """Node features: a floating ``(N, in_channels)`` tensor without NaN or inf.

    ``check_values=False`` checks type and shape only (a caller that checks several tensors
    for NaN/inf with one sync, :func:`graphattn.functional.check_all_finite`). The value check
    runs where :func:`scans_values` says (CPU tensors; any device under anomaly detection; never
    under ``torch.compile``), so a CUDA forward does not wait for the GPU."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (N, {in_channels}), got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype} "
                        "(categorical features need an embedding first)")
    check_tensor_shape(x, (None, in_channels), name)
    if x.numel() == 0 or not check_values or not scans_values(x):
        return
    lo, hi = torch.aminmax(x)  # NaN propagates into min/max: one cheap reduction, no (N, F) mask
    if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
        bad = int((~torch.isfinite(x)).any(dim=-1).sum())
        raise ValueError(f"{name} contains NaN or inf values (in {bad} of {x.size(0)} rows)")
