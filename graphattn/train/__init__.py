"""The one training loop (:func:`fit`) and its :class:`TrainConfig`, checkpoints, metrics and distributed helpers."""
from graphattn.train.config import TASK_KINDS, TrainConfig
from graphattn.train.loop import (CheckpointError, compute_metrics, evaluate, fit, load_checkpoint, model_device,
                                  resolve_device, save_checkpoint, set_seed, task_loss)

__all__ = ["TASK_KINDS", "TrainConfig", "set_seed", "resolve_device", "model_device", "task_loss", "compute_metrics",
           "evaluate", "fit", "save_checkpoint", "load_checkpoint", "CheckpointError"]
