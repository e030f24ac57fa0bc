"""One training loop for every task: fit / evaluate, metrics, early stopping, checkpoints, resume.

The loop knows nothing about graphs: a ``forward(model, batch, split) -> (logits, y)``
callable adapts it to mini-batches of molecules (graph level) or to one full graph with
split masks (node level). Checkpoints (``last.pt`` every epoch, ``best.pt`` on improvement)
are written atomically and hold only tensors and plain Python values, so they load with
``torch.load(weights_only=True)``; they carry the model config and any metadata the caller
passes (featurizer version, task names, ...), the optimizer state and all RNG states, so
``resume=True`` continues exactly where the last completed epoch ended.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import distributed as D
from .metrics import accuracy, masked_bce_with_logits, mean_over_valid, pr_auc_per_task, roc_auc_per_task

__all__ = ["TASK_KINDS", "set_seed", "task_loss", "compute_metrics", "evaluate", "fit",
           "save_checkpoint", "load_checkpoint", "CheckpointError"]

TASK_KINDS = ("binary", "multiclass", "regression")
#: primary metric per task kind and whether higher is better
PRIMARY = {"binary": ("roc_auc", True), "multiclass": ("accuracy", True), "regression": ("mae", False)}
Forward = Callable[[nn.Module, Any, str], Tuple[Tensor, Tensor]]


class CheckpointError(RuntimeError):
    """A checkpoint is missing, corrupt, or not safe to load."""


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _check_kind(kind: str) -> None:
    if kind not in TASK_KINDS:
        raise ValueError(f"kind must be one of {TASK_KINDS}, got {kind!r}")


def task_loss(kind: str, logits: Tensor, y: Tensor, pos_weight: Optional[Tensor] = None) -> Tensor:
    """binary: masked multi-task BCE (NaN labels ignored); multiclass: CE; regression: MSE (NaN ignored)."""
    _check_kind(kind)
    if kind == "binary":
        return masked_bce_with_logits(logits, y.view_as(logits).to(logits.dtype), pos_weight)
    if kind == "multiclass":
        return F.cross_entropy(logits, y.long().view(-1))
    y = y.view_as(logits).to(logits.dtype)
    mask = ~torch.isnan(y)
    return F.mse_loss(logits[mask], y[mask]) if bool(mask.any()) else logits.sum() * 0.0


def compute_metrics(kind: str, logits: Tensor, y: Tensor) -> Dict[str, Any]:
    """Metrics of one split. binary: mean and per-task ROC-AUC / PR-AUC over tasks with both
    classes; multiclass: accuracy; regression: MAE and RMSE (NaN targets ignored)."""
    _check_kind(kind)
    if kind == "binary":
        roc = roc_auc_per_task(y.view_as(logits), torch.sigmoid(logits))
        pr = pr_auc_per_task(y.view_as(logits), torch.sigmoid(logits))
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
        logits, y = forward(model, batch, split)
        outs.append(logits.float().cpu())
        ys.append(y.float().cpu())
    if not outs:
        return {"loss": float("nan")}
    logits, y = torch.cat(outs), torch.cat(ys)
    res = compute_metrics(kind, logits, y)
    res["loss"] = float(task_loss(kind, logits, y, pos_weight))
    return res


# ----------------------------------------------------------------------------- checkpoints
def save_checkpoint(path, state: Dict[str, Any]) -> None:
    """``torch.save`` to a temporary file in the same folder, then an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        torch.save(state, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path, map_location="cpu") -> Dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``: a file that would run code is refused."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a folder; give the file inside it (e.g. {path / 'best.pt'})")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"PK" and magic[:1] != b"\x80":  # torch.save writes a zip file (older torch: a pickle)
        raise CheckpointError(f"{path} is not a graphattn checkpoint (not a file written by torch.save)")
    try:
        ck = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"refusing to load {path}: it contains objects other than tensors and "
                              f"plain Python values (weights_only=True): {str(exc).splitlines()[0]}") from exc
    # a text or other non-checkpoint file makes the unpickler fail in many ways (KeyError: 105, ...)
    except (RuntimeError, EOFError, OSError, KeyError, ValueError, IndexError, TypeError) as exc:
        raise CheckpointError(f"{path} is not a readable graphattn checkpoint (truncated, corrupt or another "
                              f"kind of file?): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                              ) from exc
    if not isinstance(ck, dict):
        raise CheckpointError(f"{path} is not a graphattn checkpoint (it holds a {type(ck).__name__}, not a dict)")
    return ck


def _rng_state() -> Dict[str, Any]:
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]]}


def _set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), *n[2:]))


# ----------------------------------------------------------------------------- the loop
def _better(score: float, best: Optional[float], higher: bool) -> bool:
    if best is None or math.isnan(best):
        return True
    if math.isnan(score):
        return False
    return score > best if higher else score < best


def _fmt(split: str, res: Dict[str, Any], key: str) -> str:
    name = {"roc_auc": "auc", "accuracy": "acc"}.get(key, key)
    return f"{split} {name} {res.get(key, float('nan')):.4f}"


def fit(model: nn.Module, loaders: Dict[str, Iterable], forward: Forward, *, kind: str,
        epochs: int = 100, lr: float = 1e-3, weight_decay: float = 0.0, patience: Optional[int] = None,
        pos_weight: Optional[Tensor] = None, grad_clip: Optional[float] = 5.0, seed: int = 0,
        out_dir=None, resume: bool = False, meta: Optional[Dict[str, Any]] = None,
        progress: bool = True, log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Train with Adam, early-stop on the validation primary metric, return a summary.

    Args:
        loaders: ``{"train": ..., "val": ..., "test": ...}`` (val/test optional) iterables of batches.
        forward: ``forward(model, batch, split) -> (logits, y)``.
        kind: ``"binary"`` (multi-task, NaN = missing), ``"multiclass"`` or ``"regression"``.
        patience: stop after this many epochs without validation improvement (None = never).
        out_dir: where ``last.pt``, ``best.pt`` and ``metrics.json`` go (None = keep in memory).
        resume: continue from ``out_dir/last.pt`` if it exists.
        meta: plain-data metadata stored in every checkpoint and in ``metrics.json``.
        log: per-epoch line printer (default ``tqdm.write``, above the progress bar).

    Under ``torch.distributed`` (see :mod:`graphattn.distributed`) the model is wrapped in
    ``DistributedDataParallel``, the training batches are sharded with the global batch kept,
    the logged loss is averaged over ranks and only rank 0 logs and writes files.

    Returns: ``{"best_epoch", "epochs_run", "val": {...}, "test": {...}, "train": {...},
    "history": [...], "seconds_per_epoch"}`` with the best model's weights loaded into ``model``.
    """
    _check_kind(kind)
    from tqdm.auto import tqdm

    log = log or tqdm.write  # prints above the progress bar instead of through it
    key, higher = PRIMARY[kind]
    set_seed(seed)
    main = D.is_main()
    if not main:
        log, progress = (lambda _msg: None), False
    net = model  # the module whose weights are saved; `model` may become its DDP wrapper
    train_loader, sampler = D.shard_loader(loaders["train"], seed=seed)
    if D.is_distributed():
        model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    out_dir = Path(out_dir) if out_dir is not None else None
    if out_dir is not None and main and out_dir.is_dir():
        for stale in out_dir.glob("*.pt.*.tmp"):  # left by a process killed while saving
            stale.unlink(missing_ok=True)
    start, history, best = 1, [], {"score": None, "epoch": 0, "state": None}
    if resume and out_dir is not None and (out_dir / "last.pt").exists():
        ck = load_checkpoint(out_dir / "last.pt")
        _check_same_run(out_dir / "last.pt", ck.get("meta") or {}, meta or {})
        try:
            net.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"--resume: {out_dir / 'last.pt'} was written by a different model or "
                                  f"optimizer than this run's ({str(exc).splitlines()[0]}); choose another "
                                  "output folder or train without --resume") from exc
        start, history = ck["epoch"] + 1, ck["history"]
        best["score"], best["epoch"] = ck["best_score"], ck["best_epoch"]
        if (out_dir / "best.pt").exists():
            best["state"] = load_checkpoint(out_dir / "best.pt")["model"]
        _set_rng_state(ck["rng"])
        log(f"Resumed from {out_dir / 'last.pt'} at epoch {ck['epoch']}")

    bar = tqdm(range(start, epochs + 1), desc="train", disable=not progress, leave=False)
    for epoch in bar:
        if best["score"] is not None and patience is not None and epoch - best["epoch"] > patience:
            break
        t0 = time.perf_counter()
        model.train()
        if sampler is not None:
            sampler.set_epoch(epoch)
        total, count = 0.0, 0
        for batch in train_loader:
            logits, y = forward(model, batch, "train")
            loss = task_loss(kind, logits, y, pos_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            opt.step()
            total, count = total + float(loss.detach()) * y.size(0), count + y.size(0)
        total, count = D.all_reduce_sum(total, count)
        rec = {"epoch": epoch, "loss": total / max(count, 1), "seconds": time.perf_counter() - t0}
        for split in ("val", "test"):
            if split in loaders:
                rec[split] = evaluate(net, loaders[split], forward, kind, split, pos_weight)
        history.append(rec)
        score = rec.get("val", {}).get(key, -rec["loss"] if higher else rec["loss"])
        improved = _better(score, best["score"], higher)
        if improved:
            best.update(score=score, epoch=epoch,
                        state={k: v.detach().clone() for k, v in net.state_dict().items()})
        msg = f"Epoch {epoch:03d} | loss {rec['loss']:.4f}"
        msg += "".join(" | " + _fmt(s, rec[s], key) for s in ("val", "test") if s in rec)
        log(msg + f" | {rec['seconds']:.1f}s")
        bar.set_postfix(loss=f"{rec['loss']:.3f}", best=f"{best['score']:.3f}")
        if out_dir is not None and main:
            state = {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                     "history": history, "best_score": best["score"], "best_epoch": best["epoch"],
                     "rng": _rng_state(), "meta": meta or {}}
            if improved:
                save_checkpoint(out_dir / "best.pt", {**state, "model": best["state"]})
            save_checkpoint(out_dir / "last.pt", state)
    bar.close()
    if best["state"] is not None:
        net.load_state_dict(best["state"])
    summary = {"best_epoch": best["epoch"], "epochs_run": len(history), "history": history,
               "seconds_per_epoch": float(np.mean([h["seconds"] for h in history])) if history else 0.0}
    for split, loader in loaders.items():
        summary[split] = evaluate(net, loader, forward, kind, split, pos_weight)
    if meta:
        summary["meta"] = meta
    if out_dir is not None and main:
        write_metrics(out_dir / "metrics.json", summary)
    return summary


#: meta entries that may change when a run is resumed (e.g. more epochs); all others must match
_RESUMABLE_META = ("hparams",)
#: keys of a data spec that only say where the files are (data root moved, another machine)
_LOCATION_KEYS = ("root", "display")


def _comparable(old: Any, new: Any) -> Tuple[Any, Any]:
    """Both data specs restricted to what both know: keys a later version added (absent from
    an older run's meta) and location-only keys are not compared."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = (set(old) & set(new)) - set(_LOCATION_KEYS)
        pairs = {k: _comparable(old[k], new[k]) for k in keys}
        return {k: a for k, (a, _) in pairs.items()}, {k: b for k, (_, b) in pairs.items()}
    return old, new


def _check_same_run(path: Path, old: Dict[str, Any], new: Dict[str, Any]) -> None:
    """CheckpointError when ``--resume`` would continue another run (other data, tasks, model...)."""
    keys = sorted((set(old) & set(new)) - set(_RESUMABLE_META))
    differ = []
    for k in keys:  # data specs gain keys across versions; the model and the tasks must match exactly
        a, b = _comparable(old[k], new[k]) if k == "data" else (old[k], new[k])
        if json.dumps(_json_safe(a), sort_keys=True) != json.dumps(_json_safe(b), sort_keys=True):
            differ.append(k)
    if old and new and differ:
        raise CheckpointError(f"--resume: {path} belongs to another run (its {', '.join(differ)} differ from this "
                              "run's); choose another output folder or train without --resume")


def _json_safe(obj):
    """NaN / inf -> None (strict JSON has no NaN), recursively; tensors and numpy scalars -> float."""
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    try:
        val = float(obj)
    except (TypeError, ValueError):
        return str(obj)
    return val if math.isfinite(val) else None


def write_metrics(path, summary: Dict[str, Any]) -> None:
    """``summary`` as strict JSON (NaN -> null, e.g. a metric of an empty split)."""
    Path(path).write_text(json.dumps(_json_safe(summary), indent=2, allow_nan=False))
