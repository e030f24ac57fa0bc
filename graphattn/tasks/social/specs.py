"""The data specs of the social tasks: what a node run or a graph-set run reads, as frozen dataclasses.

A spec is built once by ``graphattn train`` (or by hand), pinned with :func:`dataclasses.replace` as the
run learns what it read (the feature source, the feature cut, the edge width), and stored in the
checkpoint's ``meta["data"]`` as :meth:`to_dict`; evaluate / predict / explain / ``--resume`` rebuild it
with :func:`data_spec_from_dict`, so that they read exactly the graph, features and split the model was
trained on::

    >>> from graphattn.tasks.social.specs import NodeDataSpec, data_spec_from_dict
    >>> spec = NodeDataSpec(name="karate", split_seed=1)
    >>> spec.label, spec.to_dict()["split"]
    ('karate', [0.6, 0.2])
    >>> data_spec_from_dict(spec.to_dict()) == spec
    True

Keys a checkpoint does not have take the value they had before the option existed (``LEGACY``); a key
the spec does not know is refused by name (a value that would otherwise be dropped silently).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple, Union

__all__ = ["SPLIT", "NodeDataSpec", "GraphDataSpec", "DataSpec", "data_spec_from_dict"]

#: (train, val) fractions of the stratified node split; test is the rest
SPLIT = (0.6, 0.2)


class _Spec:
    """``to_dict`` / ``from_dict`` at the checkpoint boundary (None-valued fields are left out)."""

    level: ClassVar[str]
    #: the value of a field that a checkpoint written before the field existed implies
    LEGACY: ClassVar[Dict[str, Any]] = {}

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"level": self.level}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        """The spec of a checkpoint's ``meta["data"]`` (absent keys: :attr:`LEGACY`, else the default);
        ``ValueError`` naming keys it does not know or another level."""
        if d.get("level", cls.level) != cls.level:
            raise ValueError(f"a {d.get('level')!r} data spec is not a {cls.level} one")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names - {"level"})
        if unknown:
            raise ValueError(f"data spec: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        values = {**cls.LEGACY, **{k: v for k, v in d.items() if k != "level"}}
        if isinstance(values.get("split"), list):
            values["split"] = tuple(values["split"])
        return cls(**values)

    def replace(self, **changes):
        """A copy with ``changes`` (:func:`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)

    @property
    def label(self) -> str:
        """How the run is named in its output folder and its lines: ``display``, else the dataset name."""
        return getattr(self, "display", None) or getattr(self, "name", None) or ""


@dataclass(frozen=True)
class NodeDataSpec(_Spec):
    """One graph whose nodes are classified (or regressed): a named set (``name``, read under ``root``)
    or the user's ``edges`` / ``target`` [/ ``features``] files, the split, and the model-dependent inputs.

    ``max_features``: the most frequent feature ids kept (``max_feature_bytes``: a memory budget that
    picks that count, resolved before the spec is stored); ``feature_source`` (``"file"`` /
    ``"structural"``) pins where the features come from; ``hops`` appends that many propagated copies of
    the features; ``pe_dim`` Laplacian-PE columns and ``label_input`` one-hot training labels are the
    inputs that depend on the model; ``sha256`` is over the user files (a warning when they change)."""

    level: ClassVar[str] = "node"

    name: Optional[str] = None
    display: Optional[str] = None
    root: Optional[str] = None
    edges: Optional[str] = None
    target: Optional[str] = None
    features: Optional[str] = None
    target_col: Optional[str] = None
    id_col: Optional[str] = None
    task_type: str = "classification"
    split: Tuple[float, float] = SPLIT
    split_seed: int = 0
    max_features: Optional[int] = None
    max_feature_bytes: Optional[int] = None
    feature_source: Optional[str] = None
    hops: int = 0
    pe_dim: int = 0
    label_input: bool = False
    sha256: Optional[str] = None

    @property
    def regression(self) -> bool:
        return self.task_type == "regression"

    @property
    def tu_text(self) -> None:  # the input-file view shared with GraphDataSpec
        return None


@dataclass(frozen=True)
class GraphDataSpec(_Spec):
    """A set of graphs to classify: a named set (``name`` under ``root``, its ``graph_source``) or a
    ``tu_text`` file / folder; ``limit`` graphs, the split seed and ``folds`` (``fold_source``: ``"files"``
    or ``"stratified"``, ``folds_sha256`` over the fold files); the structural node features
    (``max_degree``, ``rw_steps``, ``ldp``), the file's node attributes and edge features (``edge_dim``:
    their width, checked on reading), ``pe_dim`` Laplacian-PE columns, and ``sha256`` over the files."""

    level: ClassVar[str] = "graph"
    LEGACY: ClassVar[Dict[str, Any]] = {"ldp": False, "node_attr": False, "edge_attr": False}

    name: Optional[str] = None
    display: Optional[str] = None
    root: Optional[str] = None
    tu_text: Optional[str] = None
    graph_source: Optional[str] = None
    limit: Optional[int] = None
    split_seed: int = 0
    folds: Optional[int] = None
    fold_source: Optional[str] = None
    folds_sha256: Optional[str] = None
    max_degree: int = 64
    rw_steps: int = 8
    ldp: bool = True
    node_attr: bool = True
    edge_attr: bool = True
    edge_dim: Optional[int] = None
    pe_dim: int = 0
    sha256: Optional[str] = None

    @property
    def edges(self) -> None:  # the input-file view shared with NodeDataSpec
        return None

    target = features = edges


DataSpec = Union[NodeDataSpec, GraphDataSpec]


def data_spec_from_dict(d: Mapping[str, Any]) -> DataSpec:
    """The spec of a checkpoint's ``meta["data"]``, by its ``level`` (``"node"`` when absent)."""
    level = d.get("level", "node")
    kinds = {"node": NodeDataSpec, "graph": GraphDataSpec}
    if level not in kinds:
        raise ValueError(f"data spec: unknown level {level!r} (node or graph)")
    return kinds[level].from_dict(d)
