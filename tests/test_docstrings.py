"""The ``>>>`` examples in the public docstrings run and print what they say."""
import doctest
import importlib

import pytest

MODULES = ["graphattn.nn.attention.layer", "graphattn.nn.attention.score", "graphattn.nn.conv.gat_conv",
           "graphattn.nn.conv.gatv2_conv", "graphattn.nn.conv.transformer_conv",
           "graphattn.nn.models.graph_transformer", "graphattn.nn.models.node_classifier", "graphattn.functional",
           "graphattn.train.config", "graphattn.utils.registry", "graphattn.transforms.rrwp",
           "graphattn.tasks.molecules.recipe", "graphattn.tasks.molecules.tune", "graphattn.nn.models.registry"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name} has no >>> example"
    assert result.failed == 0
