"""One way to build a model from its recipe: a :class:`ModelSpec` (class name + constructor arguments).

Every training command stores that recipe in its checkpoint (``meta["model"]``, as
:meth:`ModelSpec.to_dict` writes it: ``{"class": name, "kwargs": {...}}``) and rebuilds the model from
it with :func:`build_model`; the table :data:`MODEL_CLASSES` is the one list of classes a recipe may name.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Union

from torch import nn

from graphattn.nn.models.baselines import ConvBaseline, MPNNBaseline
from graphattn.nn.models.graph_transformer import GraphClassifier
from graphattn.nn.models.node_classifier import NodeClassifier

__all__ = ["MODEL_CLASSES", "ModelSpec", "build_model"]

#: the model classes a recipe may name
MODEL_CLASSES = {"GraphClassifier": GraphClassifier, "NodeClassifier": NodeClassifier,
                 "ConvBaseline": ConvBaseline, "MPNNBaseline": MPNNBaseline}


@dataclass(frozen=True)
class ModelSpec:
    """A model's class (a key of :data:`MODEL_CLASSES`) and its constructor arguments.

    Task code may subclass it to add how the task feeds the model (the node tasks' input dropout and
    label input); :meth:`to_dict` / :meth:`from_dict` are the checkpoint boundary.

    >>> spec = ModelSpec("GraphClassifier", {"in_channels": 4, "hidden_channels": 8, "num_tasks": 2})
    >>> spec.arg("pe_dim", 0), type(spec.build()).__name__
    (0, 'GraphClassifier')
    >>> ModelSpec.from_dict(spec.to_dict()) == spec
    True
    """

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.name not in MODEL_CLASSES:
            raise ValueError(f"unknown model class {self.name!r}; expected one of {sorted(MODEL_CLASSES)}")
        object.__setattr__(self, "kwargs", copy.deepcopy(dict(self.kwargs)))

    def arg(self, key: str, default: Any = None) -> Any:
        """The constructor argument ``key`` (``default`` when the recipe leaves it out)."""
        return self.kwargs.get(key, default)

    def build(self) -> nn.Module:
        """A fresh model of this recipe."""
        return MODEL_CLASSES[self.name](**copy.deepcopy(dict(self.kwargs)))

    def replace(self, **changes: Any) -> "ModelSpec":
        """A copy with ``changes`` (fields of this class)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        """The checkpoint form, ``{"class": name, "kwargs": {...}}`` (plus a subclass's fields)."""
        return {"class": self.name, "kwargs": copy.deepcopy(dict(self.kwargs))}

    @classmethod
    def from_dict(cls, values: Union["ModelSpec", Mapping[str, Any]]) -> "ModelSpec":
        """The spec of a checkpoint's ``meta["model"]`` (a spec passes through).

        Raises:
            ValueError: a key is neither ``class`` nor ``kwargs`` nor a field of ``cls``.
        """
        if isinstance(values, ModelSpec):
            return values if isinstance(values, cls) else cls(values.name, values.kwargs)
        extra = sorted(set(values) - {"class", "kwargs"} - {f.name for f in dataclasses.fields(cls)})
        if extra:
            raise ValueError(f"unknown key(s) {extra} in a {cls.__name__}; expected 'class', 'kwargs'"
                             + "".join(f", {f.name!r}" for f in dataclasses.fields(cls)[2:]))
        if "class" not in values:
            raise ValueError(f"a model recipe needs a 'class' (one of {sorted(MODEL_CLASSES)}), got keys {sorted(values)}")
        rest = {k: v for k, v in values.items() if k not in ("class", "kwargs")}
        return cls(name=values["class"], kwargs=values.get("kwargs", {}), **rest)


def build_model(spec: Union[ModelSpec, Mapping[str, Any]]) -> nn.Module:
    """Build the model of a :class:`ModelSpec` or of its checkpoint form (``meta["model"]``; entries
    beside ``class`` and ``kwargs`` say how a task feeds the model and do not change what is built).

    Raises:
        ValueError: the class is not one of :data:`MODEL_CLASSES`.
    """
    if not isinstance(spec, ModelSpec):
        spec = ModelSpec(spec.get("class"), spec.get("kwargs", {}))
    return spec.build()
