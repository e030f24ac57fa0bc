"""Names that moved in the package's reorganisation still import from their old homes, with a
DeprecationWarning naming the new one, and are the same objects."""
import importlib

import pytest

MOVED = [("graphattn.data.molecules", "ToxicityDataset", "graphattn.data.moleculenet"),
         ("graphattn.data.molecules", "TOXICITY_DATASETS", "graphattn.data.moleculenet"),
         ("graphattn.data.molecules", "TOX21_TASKS", "graphattn.data.moleculenet"),
         ("graphattn.data.molecules", "SIDER_TASKS", "graphattn.data.moleculenet"),
         ("graphattn.data.descriptors", "AddMolDescriptors", "graphattn.transforms"),
         ("graphattn.data.hops", "AddHopEdges", "graphattn.transforms"),
         ("graphattn.data.hops", "hop_edges", "graphattn.transforms"),
         ("graphattn.data", "AddHopEdges", "graphattn.transforms"),
         ("graphattn.data", "AddMolDescriptors", "graphattn.transforms"),
         ("graphattn.data", "hop_edges", "graphattn.transforms")]


@pytest.mark.parametrize("old, name, new", MOVED)
def test_moved_names_warn_once_and_are_the_same_object(old, name, new, monkeypatch):
    mod = importlib.import_module(old)
    monkeypatch.delitem(vars(mod), name, raising=False)  # forget an earlier lookup: it is cached after one
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")) as record:
        value = getattr(mod, name)
    assert getattr(mod, name) is value is getattr(importlib.import_module(new), name)
    assert len([w for w in record if w.category is DeprecationWarning]) == 1


def test_names_importable_from_their_old_homes_without_a_warning():
    from graphattn.nn.attention import LAYER_SCORES
    from graphattn.nn.encodings import AddLaplacianPE, AddRandomWalkPE
    from graphattn.transforms import AddLaplacianPE as NewLap, AddRandomWalkPE as NewRw

    assert AddLaplacianPE is NewLap and AddRandomWalkPE is NewRw
    assert LAYER_SCORES[:3] == ("dot", "additive", "gat")
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        importlib.import_module("graphattn.data.molecules").NoSuchName  # noqa: B018
