"""One way to build a model from its recipe: ``{"class": name, "kwargs": {...}}``.

Every training command stores that recipe in its checkpoint (``meta["model"]``) and rebuilds the model
from it with :func:`build_model`; the table :data:`MODEL_CLASSES` is the one list of classes a recipe
may name.
"""
from __future__ import annotations

from typing import Any, Dict

from torch import nn

from graphattn.nn.models.baselines import ConvBaseline, MPNNBaseline
from graphattn.nn.models.graph_transformer import GraphClassifier
from graphattn.nn.models.node_classifier import NodeClassifier

__all__ = ["MODEL_CLASSES", "build_model"]

#: the model classes a recipe may name
MODEL_CLASSES = {"GraphClassifier": GraphClassifier, "NodeClassifier": NodeClassifier,
                 "ConvBaseline": ConvBaseline, "MPNNBaseline": MPNNBaseline}


def build_model(spec: Dict[str, Any]) -> nn.Module:
    """Build the model of a recipe ``{"class": name, "kwargs": {...}}`` (a checkpoint's ``meta["model"]``).

    Raises:
        ValueError: ``spec["class"]`` is not one of :data:`MODEL_CLASSES`.
    """
    if spec["class"] not in MODEL_CLASSES:
        raise ValueError(f"unknown model class {spec['class']!r}; expected one of {sorted(MODEL_CLASSES)}")
    return MODEL_CLASSES[spec["class"]](**spec["kwargs"])
