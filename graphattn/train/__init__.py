"""The one training loop (:func:`fit`) and its :class:`TrainConfig`, checkpoints, metrics and distributed helpers.

The names load on first use (PEP 562), so the torch-free :mod:`graphattn.train.config` (read by the
command line's ``--help``) does not import torch through this package.
"""
import importlib

#: the module that defines each public name
_HOME = {
    **dict.fromkeys(["CheckpointError", "load_checkpoint", "save_checkpoint"], "graphattn.train.checkpoint"),
    **dict.fromkeys(["TASK_KINDS", "TrainConfig"], "graphattn.train.config"),
    **dict.fromkeys(["compute_metrics", "evaluate", "task_loss"], "graphattn.train.evaluation"),
    **dict.fromkeys(["fit"], "graphattn.train.loop"),
    **dict.fromkeys(["model_device", "resolve_device", "set_seed"], "graphattn.train.runtime"),
}

__all__ = ["TASK_KINDS", "TrainConfig", "set_seed", "resolve_device", "model_device", "task_loss", "compute_metrics",
           "evaluate", "fit", "save_checkpoint", "load_checkpoint", "CheckpointError"]


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'graphattn.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__():
    return sorted([*globals(), *_HOME])
