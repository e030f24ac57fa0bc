"""Checkpoints of a run in progress: ``last.pt`` every epoch, ``best.pt`` on improvement, and resuming
from them (the newer of the two after a kill between their writes, the RNG states restored, another
run's folder refused)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from graphattn.train.checkpoint import (CheckpointError, check_same_run, load_checkpoint, rng_state, save_checkpoint,
                                        set_rng_state)
from graphattn.train.config import TrainConfig

__all__ = ["resume_run", "save_epoch"]


def _changed_hparams(old, new) -> Dict[str, Tuple[Any, Any]]:
    """``{name: (old, new)}`` for the hyperparameters a resumed run changes."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return {}
    return {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}


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


def resume_run(out_dir: Path, net: nn.Module, opt: torch.optim.Optimizer, config: TrainConfig, *,
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


def save_epoch(out_dir: Path, net: nn.Module, opt: torch.optim.Optimizer, epoch: int, history: list,
                best: Dict[str, Any], meta: Optional[Dict[str, Any]], kind: str, improved: bool) -> None:
    """``last.pt`` after every epoch, ``best.pt`` (with the best weights) when it improved."""
    state = {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
             "history": history, "best_score": best["score"], "best_epoch": best["epoch"],
             "rng": rng_state(), "meta": meta or {}, "kind": kind}
    if improved:
        save_checkpoint(out_dir / "best.pt", {**state, "model": best["state"]})
    save_checkpoint(out_dir / "last.pt", state)
