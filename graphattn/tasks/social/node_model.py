"""The model of a node task: :class:`NodeModelSpec` (the model's recipe plus how the task feeds it),
built from a run's hyperparameters by :func:`node_model_spec`, and run on a graph by :func:`run_model`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Union

import torch.nn.functional as F
from torch import Tensor, nn

from graphattn.nn.models.registry import ModelSpec

__all__ = ["ConsistencyLoss", "NodeModelSpec", "node_model_spec", "node_inputs", "run_model"]


@dataclass(frozen=True)
class ConsistencyLoss:
    """GRAND's consistency regulariser of a training step: ``samples`` (>= 2) forward passes, the
    loss ``weight`` · :func:`graphattn.train.metrics.consistency_loss` at sharpening ``temperature``."""

    samples: int
    weight: float = 1.0
    temperature: float = 0.5


@dataclass(frozen=True)
class NodeModelSpec(ModelSpec):
    """A node model's :class:`~graphattn.nn.models.registry.ModelSpec` and how training feeds it:
    dropout on the input features (our model; 0 for the PyG baselines), UniMP's label input (the
    data carries training-label columns, masked in training) and GRAND's consistency loss (None: off).

    >>> spec = NodeModelSpec("NodeClassifier", {"in_channels": 3, "hidden_channels": 8, "num_classes": 2},
    ...                      consistency={"samples": 2})
    >>> spec.consistency.samples, NodeModelSpec.from_dict(spec.to_dict()) == spec
    (2, True)
    """

    input_dropout: float = 0.0
    label_input: bool = False
    consistency: Optional[ConsistencyLoss] = None

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.consistency, Mapping):
            object.__setattr__(self, "consistency", ConsistencyLoss(**self.consistency))

    def to_dict(self) -> Dict[str, Any]:
        out = {**super().to_dict(), "input_dropout": self.input_dropout, "label_input": self.label_input}
        if self.consistency is not None:  # only when on: older specs and checkpoints stay as they were
            out["consistency"] = dataclasses.asdict(self.consistency)
        return out


def node_model_spec(baseline: str, data, hp: Mapping[str, Any], out_channels: Optional[int] = None) -> NodeModelSpec:
    """The model of a node run: PyG's ``baseline`` conv stack, or our model when it is ``"none"``.
    ``hp["label_input"]``: the data carries training-label columns (see
    :func:`graphattn.tasks.social.node.label_columns`), masked in training by
    :func:`graphattn.tasks.social.node.node_forward` for every model alike. ``out_channels``: the
    outputs per node (default one per class; regression: one per target)."""
    num_classes = len(data.class_names) if out_channels is None else int(out_channels)
    labels, consistency = bool(hp.get("label_input", False)), _consistency(hp)
    if baseline and baseline != "none":
        kwargs = dict(kind=baseline, in_channels=data.num_features, hidden_channels=hp["hidden"],
                      out_channels=num_classes, num_layers=hp.get("baseline_layers") or hp["layers"],
                      heads=hp["heads"], dropout=hp["dropout"])
        return NodeModelSpec("ConvBaseline", kwargs, input_dropout=0.0, label_input=labels, consistency=consistency)
    kwargs = dict(in_channels=data.num_features, hidden_channels=hp["hidden"], num_classes=num_classes,
                  num_layers=hp["layers"], heads=hp["heads"], num_global_tokens=hp["global_tokens"],
                  pe_dim=hp["pe_dim"], dropout=hp["dropout"], attn_dropout=hp.get("attn_dropout", 0.0),
                  self_loops=bool(hp.get("self_loops", False)), propagation=int(hp.get("propagation", 0)),
                  propagation_alpha=float(hp.get("propagation_alpha", 0.1)))
    if hp.get("propagation_learned"):  # only when set: older checkpoints and specs stay as they were
        kwargs["propagation_learned"] = True
    if hp.get("gcn_weight"):
        kwargs["gcn_weight"] = float(hp["gcn_weight"])
    if int(hp.get("gcn_layers", 1) or 1) > 1:
        kwargs["gcn_layers"] = int(hp["gcn_layers"])
    if hp.get("propagation_dropout"):
        kwargs["propagation_dropout"] = float(hp["propagation_dropout"])
    in_drop = hp.get("input_dropout")
    return NodeModelSpec("NodeClassifier", kwargs, input_dropout=hp["dropout"] if in_drop is None else in_drop,
                         label_input=labels, consistency=consistency)


def _consistency(hp: Mapping[str, Any]) -> Optional[ConsistencyLoss]:
    samples = int(hp.get("consistency", 0) or 0)
    if samples < 2:
        return None
    return ConsistencyLoss(samples, float(hp.get("consistency_weight", 1.0)),
                           float(hp.get("consistency_temperature", 0.5)))


def node_inputs(data) -> Dict[str, Optional[Tensor]]:
    """The tensors of a graph a node model reads: ``x``, ``edge_index``, ``pe`` and ``edge_attr``."""
    pe = getattr(data, "pe", None) if getattr(data, "pe", None) is not None else getattr(data, "lap_pe", None)
    return {"x": data.x, "edge_index": data.edge_index, "pe": pe, "edge_attr": getattr(data, "edge_attr", None)}


def run_model(model: nn.Module, spec: Union[NodeModelSpec, Mapping[str, Any]], inp: Dict[str, Optional[Tensor]],
              x: Optional[Tensor] = None) -> Tensor:
    """The model's node outputs on the inputs of :func:`node_inputs` (``x`` replaces theirs when given);
    ``spec``: a :class:`NodeModelSpec` or its checkpoint form."""
    spec = NodeModelSpec.from_dict(spec)
    x = inp["x"] if x is None else x
    if spec.name == "ConvBaseline":
        return model(x, inp["edge_index"])
    x = F.dropout(x, spec.input_dropout, model.training)
    # PE and edge features only reach a model built for them
    return model(x, inp["edge_index"], inp["edge_attr"] if spec.arg("edge_dim") else None,
                 pe=inp["pe"] if spec.arg("pe_dim") else None)
