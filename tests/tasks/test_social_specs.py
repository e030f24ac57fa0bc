"""The social data specs: frozen, round-trip through their checkpoint form, and a key they do not know is
refused by name (never dropped); keys an older checkpoint lacks take their old meaning."""
import dataclasses
from pathlib import Path

import pytest
import torch

from graphattn.tasks.social.specs import GraphDataSpec, NodeDataSpec, data_spec_from_dict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"


@pytest.mark.parametrize("spec", [NodeDataSpec(name="karate", display="karate", pe_dim=4, label_input=True),
                                  NodeDataSpec(edges="e.csv", target="t.csv", task_type="regression",
                                               target_col="views", max_features=5, sha256="ab"),
                                  GraphDataSpec(tu_text="x.txt", folds=10, fold_source="files", edge_dim=0),
                                  GraphDataSpec(name="mutag", display="mutag", limit=20, pe_dim=8)])
def test_specs_round_trip_through_their_checkpoint_form(spec):
    d = spec.to_dict()
    assert d["level"] == spec.level and all(v is not None for v in d.values())
    assert data_spec_from_dict(d) == spec and data_spec_from_dict(dict(d)).to_dict() == d
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.pe_dim = 3


def test_unknown_keys_and_levels_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown key.*hidden"):
        NodeDataSpec.from_dict({"level": "node", "name": "karate", "hidden": 64})
    with pytest.raises(ValueError, match="not a node one"):
        NodeDataSpec.from_dict({"level": "graph"})
    with pytest.raises(ValueError, match="unknown level"):
        data_spec_from_dict({"level": "edge"})


def test_older_graph_specs_keep_their_old_features_and_the_fixture_loads():
    old = GraphDataSpec.from_dict({"level": "graph", "name": "imdb-binary", "max_degree": 64, "rw_steps": 8})
    assert (old.ldp, old.node_attr, old.edge_attr, old.edge_dim) == (False, False, False, None)
    assert GraphDataSpec(name="imdb-binary").ldp  # a new run's spec: the current features
    meta = torch.load(FIXTURES / "karate_v0.pt", weights_only=False)["meta"]
    spec = data_spec_from_dict(meta["data"])
    assert isinstance(spec, NodeDataSpec) and spec.label == "karate" and spec.feature_source == "structural"
    assert spec.split == (0.6, 0.2) and not spec.regression
