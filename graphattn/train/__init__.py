"""The one training loop (:func:`fit`) and its :class:`TrainConfig`, checkpoints, metrics and distributed helpers."""
from graphattn.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from graphattn.train.config import TASK_KINDS, TrainConfig
from graphattn.train.evaluation import compute_metrics, evaluate, task_loss
from graphattn.train.loop import fit
from graphattn.train.runtime import model_device, resolve_device, set_seed

__all__ = ["TASK_KINDS", "TrainConfig", "set_seed", "resolve_device", "model_device", "task_loss", "compute_metrics",
           "evaluate", "fit", "save_checkpoint", "load_checkpoint", "CheckpointError"]
