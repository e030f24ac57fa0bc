"""One training loop for every task (:func:`fit`): epochs, early stopping, the learning-rate schedule.

The loop knows nothing about graphs: a ``forward(model, batch, split) -> (logits, y)``
callable (in training optionally ``(logits, y, aux_loss)``: a scalar added to the task loss,
e.g. a consistency regulariser) adapts it to mini-batches of molecules (graph level) or to one full graph with
split masks (node level). Checkpoints (``last.pt`` every epoch, ``best.pt`` on improvement)
are written atomically and hold only tensors and plain Python values, so they load with
``torch.load(weights_only=True)`` (:mod:`graphattn.train.checkpoint`); they carry the metadata the
caller passes (the CLI stores the model config, featurizer version, task names, ...), the task
kind, the optimizer state and all RNG states (CPU and CUDA), so ``resume=True`` continues
exactly where the last completed epoch ended (:mod:`graphattn.train.resume`). The losses and metrics per
task kind are in :mod:`graphattn.train.evaluation`, divergence checks in :mod:`graphattn.train.divergence`,
seeds, devices and threads in :mod:`graphattn.train.runtime`.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm  # tqdm.write: lines above a live bar

from graphattn.train import distributed as D
from graphattn.train.checkpoint import check_meta, write_metrics
from graphattn.train.config import SCHEDULES, TrainConfig
from graphattn.train.curves import curves_plot
from graphattn.train.divergence import aux_loss, check_weights_finite, diverged, overflow_named
from graphattn.train.evaluation import Forward, evaluate, task_loss
from graphattn.train.resume import resume_run, save_epoch
from graphattn.train.runtime import build_kernels, release_free_heap, set_seed
from graphattn.utils.files import check_out_folder
from graphattn.utils.progress import progress_bar

__all__ = ["fit", "scheduled_lr"]


# ----------------------------------------------------------------------------- the loop
def _better(score: float, best: Optional[float], higher: bool) -> bool:
    if best is None or math.isnan(best):
        return True
    if math.isnan(score):
        return False
    return score > best if higher else score < best


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


def fit(model: nn.Module, loaders: Dict[str, Iterable], forward: Forward, config: TrainConfig, *,
        pos_weight: Optional[Tensor] = None, out_dir=None, meta: Optional[Dict[str, Any]] = None,
        log: Optional[Callable[[str], None]] = None,
        on_epoch: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
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
        on_epoch: called with each finished epoch's record (``{"epoch", "loss", "val", "test", ...}``)
            after its checkpoint is saved; an exception it raises ends the run there (a search's
            pruner stops an unpromising trial this way).

    The validation metric that drives early stopping and ``best.pt`` is ``config.metric`` (default
    the kind's first: ROC-AUC, accuracy, MAE); when it is undefined on the validation split (e.g. no task there
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
    if out_dir is not None and D.is_main():
        fresh = not (config.resume and (Path(out_dir) / "last.pt").exists())
        if fresh:  # a new run (also --overwrite) starts its own log; a resumed one continues it
            (Path(out_dir) / "train.log").unlink(missing_ok=True)
        log = _logged_to(Path(out_dir) / "train.log", log)
    kind, epochs, progress = config.kind, config.epochs, config.progress
    key, higher = config.selection
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
        start, history, best = resume_run(out_dir, net, opt, config, meta=meta, log=log)
    elif config.resume and out_dir is not None:  # a typo in --out, or a folder relative to another directory
        log(f"--resume: no {out_dir / 'last.pt'} to resume from; training from epoch 1")
    warned = set()
    build_kernels(net)  # a first-time kernel build is not timed as part of epoch 1
    bar = progress_bar(range(start, epochs + 1), desc="train", disable=not progress, leave=False)
    for epoch in bar:
        if best["score"] is not None and config.patience is not None \
                and epoch - best["epoch"] > max(config.patience, 1):
            break
        for group in opt.param_groups:  # a function of the epoch alone: a resumed run continues it
            group["lr"] = scheduled_lr(config.lr, epoch, epochs, config.schedule, config.warmup)
        rec = _run_epoch(model, net, train_loader, sampler, loaders, forward, opt, epoch, config,
                         pos_weight=pos_weight, resumed=resumed)
        history.append(rec)
        improved = _update_best(best, _score(rec, key, higher, log, warned), epoch, higher, net)
        log(_epoch_line(rec, key))
        bar.set_postfix(loss=f"{rec['loss']:.3f}", best=f"{best['score']:.3f}", refresh=False)
        if out_dir is not None and main:
            save_epoch(out_dir, net, opt, epoch, history, best, meta, kind, improved)
        release_free_heap()
        if on_epoch is not None:
            on_epoch(rec)
    bar.close()
    return _summary(net, loaders, forward, config, pos_weight, best, history, meta, train_loader, sampler,
                    out_dir if main else None)


def _run_epoch(model: nn.Module, net: nn.Module, train_loader: Iterable, sampler, loaders: Dict[str, Iterable],
               forward: Forward, opt: torch.optim.Optimizer, epoch: int, config: TrainConfig, *,
               pos_weight: Optional[Tensor], resumed: bool) -> Dict[str, Any]:
    """Train ``model`` (``net``, or its DDP wrapper) one epoch and evaluate ``net`` on the ``val``
    and ``test`` loaders: the epoch's record ``{"epoch", "loss", "seconds", "val", "test"}``."""
    t0 = time.perf_counter()
    model.train()
    if sampler is not None:
        sampler.set_epoch(epoch)
    total, count = _train_epoch(model, train_loader, forward, opt, epoch, config, pos_weight=pos_weight,
                                resumed=resumed)
    check_weights_finite(net, epoch)
    total, count = D.all_reduce_sum(total, count)
    rec = {"epoch": epoch, "loss": total / max(count, 1), "seconds": time.perf_counter() - t0}
    for split in ("val", "test"):
        if split in loaders:
            rec[split] = evaluate(net, loaders[split], overflow_named(forward, epoch), config.kind, split, pos_weight,
                                  config.loss)
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


def _train_epoch(model: nn.Module, loader: Iterable, forward: Forward, opt: torch.optim.Optimizer, epoch: int,
                 config: TrainConfig, *, pos_weight: Optional[Tensor], resumed: bool) -> Tuple[float, int]:
    """One pass over the training batches (loss, backward, clipping, step): the loss summed over
    the examples, and their number. A non-finite loss on any rank stops every rank."""
    total, count, batches = 0.0, 0, 0
    checked = overflow_named(forward, epoch)
    for batches, batch in enumerate(loader, 1):
        # before the first optimizer step, non-finite activations come from the batch itself
        step = checked if epoch > 1 or resumed or batches > 1 else forward
        logits, y, *aux = step(model, batch, "train")
        loss = task_loss(config.kind, logits, y, pos_weight, config.loss)
        if aux and aux[0] is not None:
            loss = loss + aux_loss(aux[0], loss.device)
        value = float(loss.detach())
        # under DDP the ranks agree first (one scalar all-reduce): a rank raising alone would
        # leave the others waiting in the gradient all-reduce of backward()
        if D.all_reduce_sum(0.0 if math.isfinite(value) else 1.0)[0] > 0:
            diverged(epoch, (batches, value) if not math.isfinite(value) else None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        total, count = total + value * y.size(0), count + y.size(0)
    if batches == 0:
        raise ValueError("the train loader yielded no batches (empty training split?)")
    return total, count


def _summary(net: nn.Module, loaders: Dict[str, Iterable], forward: Forward, config: TrainConfig,
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
        summary[split] = evaluate(net, loader, forward, config.kind, split, pos_weight, config.loss)
    if meta:
        summary["meta"] = meta
    if out_dir is not None:
        write_metrics(out_dir / "metrics.json", summary, environment=True)
        if len(history) >= 2:  # one epoch is one point: no curve to draw
            _write_curves(out_dir, history, config.selection[0], best["epoch"])
    return summary


def _logged_to(path: Path, log: Callable[[str], None]) -> Callable[[str], None]:
    """``log``, each line also appended to ``path`` (the run's ``train.log``; a resumed run continues it)."""
    def both(msg: str) -> None:
        log(msg)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(msg.rstrip("\n") + "\n")

    return both


def _write_curves(out_dir: Path, history: list, key: str, best_epoch: int) -> None:
    """``curves.png`` of a run, when matplotlib is there (it is an optional dependency)."""
    try:
        curves_plot(history, key, best_epoch, out_dir / "curves.png", title=out_dir.name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("matplotlib"):
            raise


