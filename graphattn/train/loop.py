"""One training loop for every task: fit / evaluate, metrics, early stopping, checkpoints, resume.

The loop knows nothing about graphs: a ``forward(model, batch, split) -> (logits, y)``
callable (in training optionally ``(logits, y, aux_loss)``: a scalar added to the task loss,
e.g. a consistency regulariser) adapts it to mini-batches of molecules (graph level) or to one full graph with
split masks (node level). Checkpoints (``last.pt`` every epoch, ``best.pt`` on improvement)
are written atomically and hold only tensors and plain Python values, so they load with
``torch.load(weights_only=True)`` (:mod:`graphattn.train.checkpoint`); they carry the metadata the
caller passes (the CLI stores the model config, featurizer version, task names, ...), the task
kind, the optimizer state and all RNG states (CPU and CUDA), so ``resume=True`` continues
exactly where the last completed epoch ended.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import random
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from graphattn.nn.attention import GraphSelfAttention
from graphattn.ops import extension
from graphattn.train import distributed as D
from graphattn.train.checkpoint import (CheckpointError, check_meta, check_same_run, load_checkpoint, rng_state,
                                        save_checkpoint, set_rng_state, write_metrics)
from graphattn.train.config import SCHEDULES, TASK_KINDS, TrainConfig
from graphattn.train.metrics import accuracy, masked_bce_with_logits, mean_over_valid, pr_auc_per_task, roc_auc_per_task
from graphattn.utils.files import check_out_folder

__all__ = ["TASK_KINDS", "SCHEDULES", "TrainConfig", "scheduled_lr", "threads_for", "build_kernels", "set_seed",
           "resolve_device", "model_device", "task_loss", "compute_metrics", "evaluate", "fit", "save_checkpoint",
           "load_checkpoint", "CheckpointError"]
#: primary metric per task kind and whether higher is better
PRIMARY = {"binary": ("roc_auc", True), "multiclass": ("accuracy", True), "regression": ("mae", False)}
Forward = Callable[[nn.Module, Any, str], Tuple[Tensor, Tensor]]


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(device=None) -> torch.device:
    """The device to train on: ``None`` / ``"auto"`` = the GPU when CUDA is available, else the
    CPU; ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a :class:`torch.device` as given. Asking for a
    GPU that is not there is a ``ValueError`` (not a silent fall-back to the CPU)."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}") from exc
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")
    if dev.type == "cpu":
        return torch.device("cpu")  # "cpu:N" is the same CPU
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError(f"--device {device}: no CUDA GPU is available here (torch "
                         f"{torch.__version__}); use --device cpu or auto")
    if dev.index is not None and dev.index >= count:
        raise ValueError(f"--device {device}: only {count} CUDA GPU(s) here (cuda:0..cuda:{count - 1})")
    return dev


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s parameters (the CPU for a model without any)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _check_kind(kind: str) -> None:
    if kind not in TASK_KINDS:
        raise ValueError(f"kind must be one of {TASK_KINDS}, got {kind!r}")


def _changed_hparams(old, new) -> Dict[str, Tuple[Any, Any]]:
    """``{name: (old, new)}`` for the hyperparameters a resumed run changes."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return {}
    return {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}


def task_loss(kind: str, logits: Tensor, y: Tensor, pos_weight: Optional[Tensor] = None) -> Tensor:
    """binary: masked multi-task BCE (NaN labels ignored); multiclass: CE; regression: MSE (NaN
    ignored). No labels at all give a zero loss (with a graph, so every rank still steps alike)."""
    _check_kind(kind)
    if kind in ("binary", "regression") and y.numel() != logits.numel():
        raise ValueError(f"kind={kind!r}: the labels {tuple(y.shape)} do not match the model's outputs "
                         f"{tuple(logits.shape)} (one output per task: (B, T) or (B,); for C classes with "
                         "integer labels use kind='multiclass')")
    if kind == "binary":
        return masked_bce_with_logits(logits, y.view_as(logits).to(logits.dtype), pos_weight)
    if kind == "multiclass":  # a batch without labelled nodes (mini-batch partitions): zero loss
        y = y.long().view(-1)
        return F.cross_entropy(logits, y) if y.numel() else logits.sum() * 0.0
    y = y.view_as(logits).to(logits.dtype)
    mask = ~torch.isnan(y)
    return F.mse_loss(logits[mask], y[mask]) if bool(mask.any()) else logits.sum() * 0.0


def compute_metrics(kind: str, logits: Tensor, y: Tensor) -> Dict[str, Any]:
    """Metrics of one split. binary: mean and per-task ROC-AUC / PR-AUC over tasks with both
    classes; multiclass: accuracy; regression: MAE and RMSE (NaN targets ignored)."""
    _check_kind(kind)
    if kind == "binary":
        # ranked on the logits (AUCs are invariant to the monotone sigmoid, which would turn
        # logits above ~17 into ties at exactly 1.0 in float32)
        roc = roc_auc_per_task(y.view_as(logits), logits)
        pr = pr_auc_per_task(y.view_as(logits), logits)
        return {"roc_auc": mean_over_valid(roc), "pr_auc": mean_over_valid(pr),
                "roc_auc_per_task": [None if math.isnan(v) else float(v) for v in roc]}
    if kind == "multiclass":
        return {"accuracy": accuracy(logits, y.long().view(-1))}
    y = y.view_as(logits)
    mask = ~torch.isnan(y)
    err = (logits - y)[mask]
    return {"mae": float(err.abs().mean()) if err.numel() else float("nan"),
            "rmse": float(err.pow(2).mean().sqrt()) if err.numel() else float("nan")}


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, forward: Forward, kind: str, split: str = "val",
             pos_weight: Optional[Tensor] = None) -> Dict[str, Any]:
    """Run ``model`` over ``loader`` in eval mode; return metrics plus ``loss``."""
    model.eval()
    outs, ys = [], []
    for batch in loader:
        logits, y = forward(model, batch, split)[:2]
        outs.append(logits.float().cpu())
        ys.append(y.float().cpu())
    if not outs:
        return {"loss": float("nan")}
    logits, y = torch.cat(outs), torch.cat(ys)
    res = compute_metrics(kind, logits, y)
    res["loss"] = float(task_loss(kind, logits, y, pos_weight))
    return res


# ----------------------------------------------------------------------------- the loop
def _better(score: float, best: Optional[float], higher: bool) -> bool:
    if best is None or math.isnan(best):
        return True
    if math.isnan(score):
        return False
    return score > best if higher else score < best


_MALLOC_TRIM = None


def release_free_heap() -> None:
    """Give freed heap memory back to the system (glibc's ``malloc_trim(0)``; a no-op elsewhere).
    Mini-batches of varying sizes (neighbour sampling) fragment glibc's heap, which then keeps
    every freed block: resident memory grew ~300 MB per epoch on a 50k-node graph (0.5 -> 4.6 GB
    in 12 epochs) and stays at ~0.5 GB between epochs when :func:`fit` trims after each (epoch
    time unchanged). Within an epoch the heap still grows batch by batch (200k nodes / 2M edges,
    neighbour sampling: peak 2.3-2.5 GB, of which ~1.4 GB freed-but-kept heap); trimming
    after every batch cut the peak to 0.96 GB for ~35 % more time, so it is not done by default:
    call this from a batch loop, or run with ``MALLOC_TRIM_THRESHOLD_`` set, when memory binds."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc (macOS, musl without it, Windows)
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


def _float_tensors(obj):
    """The floating-point tensors of a batch (a tensor, a PyG Data/Batch, or lists/dicts of them)."""
    if isinstance(obj, Tensor):
        if obj.is_floating_point():
            yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _float_tensors(o)
    elif isinstance(obj, dict):
        yield from _float_tensors(list(obj.values()))
    elif hasattr(obj, "to_dict"):
        yield from _float_tensors(obj.to_dict())


def _input_tensors(batch) -> List[Tensor]:
    """The floating-point tensors of a batch other than its labels, which may hold NaN (missing)
    by design: a Data's / dict's ``y``, a tuple/list batch's last tensor."""
    if hasattr(batch, "to_dict") and not isinstance(batch, dict):
        batch = batch.to_dict()
    if isinstance(batch, dict):
        return list(_float_tensors({k: v for k, v in batch.items() if k != "y"}))
    if isinstance(batch, (list, tuple)):
        items = batch[:-1] if batch and isinstance(batch[-1], Tensor) else batch
        return [t for it in items for t in (_input_tensors(it) if hasattr(it, "to_dict") else _float_tensors(it))]
    return list(_float_tensors(batch))


def _overflow_named(forward: Forward, epoch: int) -> Forward:
    """``forward`` whose "contains NaN or inf" input errors, raised inside the model by a batch
    whose own tensors are finite, become the ``FloatingPointError`` of a diverged model: its
    hidden states overflowed (e.g. ``--lr 1e7``), which the layers' input checks would otherwise
    report as if the user's features held NaN. Labels may hold NaN (missing) and are not
    looked at: a batch's ``y``, a dict's ``"y"``, a tuple/list batch's last tensor (so NaN in the
    last tensor of a tuple that carries no labels passes for a divergence)."""
    def checked(model, batch, split):
        try:
            return forward(model, batch, split)
        except ValueError as exc:
            if " contains NaN" not in str(exc):
                raise
            # the tensor the error names (x, edge_attr) in the batch; else every input tensor of it
            # (PyG batches may pad with NaN on purpose, e.g. Laplacian PE columns past a graph's size)
            name = str(exc).split(" contains NaN", 1)[0].split()[-1]
            named = None if isinstance(batch, (Tensor, list, tuple)) else \
                batch.get(name) if isinstance(batch, dict) else getattr(batch, name, None)
            inputs = [named] if isinstance(named, Tensor) else _input_tensors(batch)
            if not all(bool(torch.isfinite(t).all()) for t in inputs if t.is_floating_point()):
                raise
            raise FloatingPointError(f"the model's activations are not finite at epoch {epoch} ({split}) although "
                                     "the batch is: the model diverged; try a lower learning rate") from exc
    return checked


def _diverged(epoch: int, bad) -> None:
    where = f"batch {bad[0]} (loss {bad[1]})" if bad else "the same step on another rank"
    raise FloatingPointError(f"training loss is not finite at epoch {epoch}, {where}: the model diverged "
                             "(try a lower learning rate) or a batch holds non-finite features")


def _score(rec: Dict[str, Any], key: str, higher: bool, log: Callable[[str], None], warned: set) -> float:
    """The number early stopping compares (oriented so that ``higher`` is better): the
    validation primary metric, else the validation loss (metric undefined there, e.g. no task
    with both classes), else the training loss (no or an empty validation split)."""
    val = rec.get("val")
    if val and not math.isnan(val.get(key, float("nan"))):
        return val[key]
    if val and not math.isnan(val.get("loss", float("nan"))):
        why, source = f"validation {key} is undefined (e.g. no task has both classes in the validation split)", "val"
    else:
        why, source = ("the validation split is empty" if val else None), "train"
    if why and why not in warned:
        warned.add(why)
        log(f"Warning: {why}; early stopping and best.pt follow the "
            f"{'validation' if source == 'val' else 'training'} loss instead")
    loss = val["loss"] if source == "val" else rec["loss"]
    return -loss if higher else loss


def scheduled_lr(lr: float, epoch: int, epochs: int, schedule: str = "constant", warmup: int = 0) -> float:
    """The learning rate of epoch ``epoch`` (1-based) of a run of ``epochs``: ``lr`` ramped up
    linearly over the first ``warmup`` epochs (``lr * epoch / (warmup + 1)``), then ``lr``
    (``"constant"``) or ``lr * (1 + cos(pi * t)) / 2`` with ``t`` going from 0 at the first epoch
    after the warm-up to ``(n - 1) / n`` at the last (``"cosine"``: never exactly 0)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0 (epochs), got {warmup!r}")
    if epoch <= warmup:
        return lr * epoch / (warmup + 1)
    if schedule == "constant":
        return lr
    n = max(epochs - warmup, 1)
    return lr * 0.5 * (1.0 + math.cos(math.pi * (epoch - warmup - 1) / n))


def _fmt(split: str, res: Dict[str, Any], key: str) -> str:
    name = {"roc_auc": "auc", "accuracy": "acc"}.get(key, key)
    v = res.get(key)
    return f"{split} {name} " + ("n/a" if v is None or v != v else f"{v:.4f}")  # NaN: undefined (one class)


def _newer_best(out_dir: Path, ck: Dict[str, Any], log: Callable[[str], None]) -> Dict[str, Any]:
    """``best.pt`` instead of ``last.pt`` when the run was killed between writing the two for one
    epoch: ``best.pt`` of an improving epoch is a complete state (weights, optimizer, RNG, history)
    one epoch ahead, and the older ``last.pt``'s best weights were overwritten by it."""
    path = out_dir / "best.pt"
    if not path.exists():
        return ck
    bk = load_checkpoint(path)
    if bk.get("epoch") != ck.get("epoch", -1) + 1 or not all(k in bk for k in ("optimizer", "rng", "history")):
        return ck
    try:
        check_same_run(path, bk.get("meta") or {}, ck.get("meta") or {})
    except CheckpointError:
        return ck  # another run's: _resumed_best_state refuses it
    log(f"{path} is one epoch ahead of last.pt (stopped between the two saves): resuming from it")
    return bk


def _resumed_best_state(out_dir: Path, ck: Dict[str, Any]) -> Optional[Dict[str, Tensor]]:
    """The best weights of a resumed run: ``best.pt`` when it is this run's (same meta as
    ``last.pt``) from its recorded best epoch. Missing, or another run's / epoch's, it is a
    :class:`CheckpointError`: the run would report and save other weights under the best
    epoch's name (a run killed between writing ``best.pt`` and ``last.pt`` of one epoch resumes
    from that ``best.pt``: :func:`_newer_best`)."""
    path = out_dir / "best.pt"
    if not ck.get("best_epoch"):
        return None
    if not path.exists():
        raise CheckpointError(f"--resume: {path} is missing (last.pt records the best weights at epoch "
                              f"{ck['best_epoch']}); copy best.pt along with last.pt, or train without --resume")
    bk = load_checkpoint(path)
    try:
        check_same_run(path, bk.get("meta") or {}, ck.get("meta") or {})
    except CheckpointError:
        raise CheckpointError(f"--resume: {path} belongs to another run than {out_dir / 'last.pt'} (their "
                              "settings differ); choose another output folder or train without --resume") from None
    if bk.get("epoch") == ck["best_epoch"]:
        return bk["model"]
    raise CheckpointError(f"--resume: {path} holds {'epoch ' + str(bk['epoch']) if bk.get('epoch') else 'no epoch'} but last.pt records the best epoch "
                          f"{ck['best_epoch']} (files of two runs in one folder?); choose another output folder "
                          "or train without --resume")


def build_kernels(model: nn.Module) -> None:
    """Build (or load) the fused CPU attention kernel now when ``model`` has graph attention layers on the
    CPU: the one-time build takes about a minute, announced on stderr, and would otherwise land inside the
    first epoch (and its progress bar's time estimate)."""
    if model_device(model).type == "cpu" and any(isinstance(m, GraphSelfAttention) for m in model.modules()):
        extension.fused_available()


def fit(model: nn.Module, loaders: Dict[str, Iterable], forward: Forward, config: TrainConfig, *,
        pos_weight: Optional[Tensor] = None, out_dir=None, meta: Optional[Dict[str, Any]] = None,
        log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Train with Adam, early-stop on the validation primary metric, return a summary.

    Args:
        loaders: ``{"train": ..., "val": ..., "test": ...}`` (val/test optional) iterables of batches.
        forward: ``forward(model, batch, split) -> (logits, y)``; in training it may return
            ``(logits, y, aux)`` with a scalar tensor ``aux`` added to the task loss (the loss
            logged and checked for finiteness is the sum).
        config: the run's settings (:class:`~graphattn.train.config.TrainConfig`: kind, epochs,
            learning rate and schedule, patience, clipping, seed, resume, progress bar). With
            ``resume`` a new ``lr`` / ``weight_decay`` applies from the resumed epoch on; another
            ``kind`` or ``meta`` is refused.
        pos_weight: ``(T,)`` positive-class weights of the binary loss (finite, > 0).
        out_dir: where ``last.pt``, ``best.pt`` and ``metrics.json`` go (None = keep in memory).
        meta: plain-data metadata (dicts, lists, str, int, float, bool, None, tensors) stored in
            every checkpoint and in ``metrics.json``.
        log: per-epoch line printer (default ``tqdm.write``, above the progress bar).

    The validation metric that drives early stopping and ``best.pt`` is the kind's primary one
    (ROC-AUC, accuracy, MAE); when it is undefined on the validation split (e.g. no task there
    has both classes) the validation loss is used instead, with a warning. A non-finite
    training loss stops the run with a ``FloatingPointError`` naming the epoch and batch.

    Under ``torch.distributed`` (see :mod:`graphattn.train.distributed`) the model is wrapped in
    ``DistributedDataParallel``, the training batches are sharded with the global batch kept,
    the logged loss is averaged over ranks and only rank 0 logs and writes files.

    Returns: ``{"best_epoch", "epochs_run", "val": {...}, "test": {...}, "train": {...},
    "history": [...], "seconds_per_epoch"}`` with the best model's weights loaded into ``model``.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a graphattn.train.TrainConfig, got {type(config).__name__}")
    if meta:
        check_meta(meta)
    check_out_folder(out_dir, "out_dir")  # a file (or one above it): refused before the first epoch
    log = log or tqdm.write  # prints above the progress bar instead of through it
    kind, epochs, progress = config.kind, config.epochs, config.progress
    key, higher = PRIMARY[kind]
    set_seed(config.seed)
    main = D.is_main()
    if not main:
        log, progress = (lambda _msg: None), False
    net = model  # the module whose weights are saved; `model` may become its DDP wrapper
    train_loader, sampler = D.shard_loader(loaders["train"], seed=config.seed)
    if D.is_distributed():
        model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    out_dir = Path(out_dir) if out_dir is not None else None
    if out_dir is not None and main and out_dir.is_dir():
        for stale in [*out_dir.glob("*.pt.*.tmp"), *out_dir.glob("metrics.json.*.tmp")]:  # killed while saving
            stale.unlink(missing_ok=True)
    start, history, best = 1, [], {"score": None, "epoch": 0, "state": None}
    resumed = bool(config.resume and out_dir is not None and (out_dir / "last.pt").exists())
    if resumed:
        start, history, best = _resume(out_dir, net, opt, config, meta=meta, log=log)
    elif config.resume and out_dir is not None:  # a typo in --out, or a folder relative to another directory
        log(f"--resume: no {out_dir / 'last.pt'} to resume from; training from epoch 1")
    warned = set()
    build_kernels(net)  # a first-time kernel build is not timed as part of epoch 1
    bar = tqdm(range(start, epochs + 1), desc="train", disable=not progress, leave=False)
    for epoch in bar:
        if best["score"] is not None and config.patience is not None \
                and epoch - best["epoch"] > max(config.patience, 1):
            break
        for group in opt.param_groups:  # a function of the epoch alone: a resumed run continues it
            group["lr"] = scheduled_lr(config.lr, epoch, epochs, config.schedule, config.warmup)
        rec = _run_epoch(model, net, train_loader, sampler, loaders, forward, opt, epoch, kind=kind,
                         pos_weight=pos_weight, grad_clip=config.grad_clip, resumed=resumed)
        history.append(rec)
        improved = _update_best(best, _score(rec, key, higher, log, warned), epoch, higher, net)
        log(_epoch_line(rec, key))
        bar.set_postfix(loss=f"{rec['loss']:.3f}", best=f"{best['score']:.3f}")
        if out_dir is not None and main:
            _save_epoch(out_dir, net, opt, epoch, history, best, meta, kind, improved)
        release_free_heap()
    bar.close()
    return _summary(net, loaders, forward, kind, pos_weight, best, history, meta, train_loader, sampler,
                    out_dir if main else None)


def _run_epoch(model: nn.Module, net: nn.Module, train_loader: Iterable, sampler, loaders: Dict[str, Iterable],
               forward: Forward, opt: torch.optim.Optimizer, epoch: int, *, kind: str, pos_weight: Optional[Tensor],
               grad_clip: Optional[float], resumed: bool) -> Dict[str, Any]:
    """Train ``model`` (``net``, or its DDP wrapper) one epoch and evaluate ``net`` on the ``val``
    and ``test`` loaders: the epoch's record ``{"epoch", "loss", "seconds", "val", "test"}``."""
    t0 = time.perf_counter()
    model.train()
    if sampler is not None:
        sampler.set_epoch(epoch)
    total, count = _train_epoch(model, train_loader, forward, opt, epoch, kind=kind, pos_weight=pos_weight,
                                grad_clip=grad_clip, resumed=resumed)
    _check_weights_finite(net, epoch)
    total, count = D.all_reduce_sum(total, count)
    rec = {"epoch": epoch, "loss": total / max(count, 1), "seconds": time.perf_counter() - t0}
    for split in ("val", "test"):
        if split in loaders:
            rec[split] = evaluate(net, loaders[split], _overflow_named(forward, epoch), kind, split, pos_weight)
    return rec


def _update_best(best: Dict[str, Any], score: float, epoch: int, higher: bool, net: nn.Module) -> bool:
    """Record ``epoch`` (its score and a copy of ``net``'s weights) in ``best`` when ``score`` beats
    it; whether it did."""
    improved = _better(score, best["score"], higher)
    if improved:
        best.update(score=score, epoch=epoch, state={k: v.detach().clone() for k, v in net.state_dict().items()})
    return improved


def _epoch_line(rec: Dict[str, Any], key: str) -> str:
    """The log line of one epoch: ``Epoch 003 | loss 0.4120 | val ... | test ... | 1.2s``."""
    msg = f"Epoch {rec['epoch']:03d} | loss {rec['loss']:.4f}"
    msg += "".join(" | " + _fmt(s, rec[s], key) for s in ("val", "test") if s in rec)
    return msg + f" | {rec['seconds']:.1f}s"


def _resume(out_dir: Path, net: nn.Module, opt: torch.optim.Optimizer, config: TrainConfig, *,
            meta: Optional[Dict[str, Any]], log: Callable[[str], None]) -> Tuple[int, List[Dict[str, Any]], Dict[str, Any]]:
    """Load ``out_dir/last.pt`` (or ``best.pt`` when it is one epoch ahead) into ``net`` and ``opt``
    (with this run's ``lr`` and ``weight_decay``) and restore the RNG states: ``(first epoch to
    train, history, best)``. Another run's checkpoint (other meta, kind, model or optimizer) is a
    :class:`CheckpointError`."""
    kind, epochs = config.kind, config.epochs
    ck = load_checkpoint(out_dir / "last.pt")
    check_same_run(out_dir / "last.pt", ck.get("meta") or {}, meta or {})
    newer = _newer_best(out_dir, ck, log)
    source, ck = (out_dir / ("last.pt" if newer is ck else "best.pt")), newer
    if ck.get("kind", kind) != kind:
        raise CheckpointError(f"--resume: {out_dir / 'last.pt'} was trained as kind={ck['kind']!r}, this "
                              f"run is kind={kind!r}; choose another output folder")
    try:
        net.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        for group in opt.param_groups:  # the hyperparameters of this run, not the old ones
            group["lr"], group["weight_decay"] = config.lr, config.weight_decay
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"--resume: {out_dir / 'last.pt'} was written by a different model or "
                              f"optimizer than this run's ({str(exc).splitlines()[0]}); choose another "
                              "output folder or train without --resume") from exc
    start, history = ck["epoch"] + 1, ck["history"]
    best = {"score": ck["best_score"], "epoch": ck["best_epoch"], "state": None}
    best["state"] = _resumed_best_state(out_dir, ck)
    set_rng_state(ck["rng"])
    log(f"Resumed from {source} at epoch {ck['epoch']}")
    changed = _changed_hparams((ck.get("meta") or {}).get("hparams"), (meta or {}).get("hparams"))
    if changed:  # allowed (e.g. more epochs, a new lr), but the record shows only the new values: say so
        log("--resume with changed settings (from this epoch on; metrics.json records the new ones): "
            + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()))
    if start > epochs:
        log(f"--resume: the run has {start - 1} epochs already (--epochs {epochs}): nothing to train; the "
            "best model is evaluated again")
    return start, history, best


def _aux_loss(aux, device: torch.device) -> Tensor:
    """The auxiliary loss term ``forward`` returned third, as a 0-dim tensor (a Python / NumPy
    number is converted); anything but a scalar is a ``ValueError``."""
    if not isinstance(aux, Tensor) and np.ndim(aux) == 0 and isinstance(aux, (int, float, np.number)):
        aux = torch.as_tensor(float(aux), device=device)
    if not isinstance(aux, Tensor) or aux.numel() != 1:
        raise ValueError("forward returned a third value that is not a scalar: it is added to the loss "
                         "as an auxiliary term; return (logits, y) or (logits, y, scalar_loss), got "
                         f"{tuple(aux.shape) if isinstance(aux, Tensor) else type(aux).__name__}")
    return aux.reshape(())


def _train_epoch(model: nn.Module, loader: Iterable, forward: Forward, opt: torch.optim.Optimizer, epoch: int, *,
                 kind: str, pos_weight: Optional[Tensor], grad_clip: Optional[float],
                 resumed: bool) -> Tuple[float, int]:
    """One pass over the training batches (loss, backward, clipping, step): the loss summed over
    the examples, and their number. A non-finite loss on any rank stops every rank."""
    total, count, batches = 0.0, 0, 0
    checked = _overflow_named(forward, epoch)
    for batches, batch in enumerate(loader, 1):
        # before the first optimizer step, non-finite activations come from the batch itself
        step = checked if epoch > 1 or resumed or batches > 1 else forward
        logits, y, *aux = step(model, batch, "train")
        loss = task_loss(kind, logits, y, pos_weight)
        if aux and aux[0] is not None:
            loss = loss + _aux_loss(aux[0], loss.device)
        value = float(loss.detach())
        # under DDP the ranks agree first (one scalar all-reduce): a rank raising alone would
        # leave the others waiting in the gradient all-reduce of backward()
        if D.all_reduce_sum(0.0 if math.isfinite(value) else 1.0)[0] > 0:
            _diverged(epoch, (batches, value) if not math.isfinite(value) else None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        total, count = total + value * y.size(0), count + y.size(0)
    if batches == 0:
        raise ValueError("the train loader yielded no batches (empty training split?)")
    return total, count


def _check_weights_finite(net: nn.Module, epoch: int) -> None:
    """FloatingPointError when an optimizer step of ``epoch`` made a weight non-finite."""
    params = [p for p in net.parameters() if p.numel()]
    if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):  # one sync
        # the loss of the last step was finite but its update overflowed: say so here rather
        # than let the validation pass fail on non-finite activations
        raise FloatingPointError(f"the model's weights are not finite after epoch {epoch} (an optimizer step "
                                 "overflowed): the model diverged; try a lower learning rate")


def _save_epoch(out_dir: Path, net: nn.Module, opt: torch.optim.Optimizer, epoch: int, history: list,
                best: Dict[str, Any], meta: Optional[Dict[str, Any]], kind: str, improved: bool) -> None:
    """``last.pt`` after every epoch, ``best.pt`` (with the best weights) when it improved."""
    state = {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
             "history": history, "best_score": best["score"], "best_epoch": best["epoch"],
             "rng": rng_state(), "meta": meta or {}, "kind": kind}
    if improved:
        save_checkpoint(out_dir / "best.pt", {**state, "model": best["state"]})
    save_checkpoint(out_dir / "last.pt", state)


def _summary(net: nn.Module, loaders: Dict[str, Iterable], forward: Forward, kind: str,
             pos_weight: Optional[Tensor], best: Dict[str, Any], history: list, meta: Optional[Dict[str, Any]],
             train_loader, sampler, out_dir: Optional[Path]) -> Dict[str, Any]:
    """Load the best weights into ``net``, evaluate it on every split and write ``metrics.json``
    to ``out_dir`` (``None``: not written, as on ranks other than 0)."""
    if best["state"] is not None:
        net.load_state_dict(best["state"])
    summary = {"best_epoch": best["epoch"], "epochs_run": len(history), "history": history,
               "seconds_per_epoch": float(np.mean([h["seconds"] for h in history])) if history else 0.0}
    if sampler is train_loader and hasattr(train_loader, "set_shard"):
        # a mini-batch loader sharded in place (rank r's batches): the train metrics cover every batch
        train_loader.set_shard(0, 1)
    for split, loader in loaders.items():
        summary[split] = evaluate(net, loader, forward, kind, split, pos_weight)
    if meta:
        summary["meta"] = meta
    if out_dir is not None:
        write_metrics(out_dir / "metrics.json", summary, environment=True)
    return summary


def threads_for(num_edges: int, threads: Optional[int] = None) -> None:
    """One intra-op thread for small graphs: thread start-up costs more than the work (and
    on a busy machine several threads per process make a 34-node epoch 50x slower); an
    explicit ``threads`` (``--threads``) wins."""
    if threads is None and num_edges < 20_000:
        torch.set_num_threads(1)
