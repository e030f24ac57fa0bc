"""Graph self-attention: the layer and its scores, one class each.

- :mod:`~graphattn.nn.attention.layer`: :class:`GraphSelfAttention` (input checks, self-loops, the
  CSR view, the root term, PyG's return contract, explainer hooks);
- :mod:`~graphattn.nn.attention.score`: :class:`EdgeScore`, the base of the scores, and the
  :data:`SCORES` registry; :mod:`~graphattn.nn.attention.dot`, :mod:`~graphattn.nn.attention.additive`,
  :mod:`~graphattn.nn.attention.gat`, :mod:`~graphattn.nn.attention.bilinear`,
  :mod:`~graphattn.nn.attention.aft` (attention-free): one score each,
  owning its projections and its score / value computation;
- :mod:`~graphattn.nn.attention.projections`: widths, linear layers, state-dict layouts;
- :mod:`~graphattn.nn.attention.weights`: attention weights with a gradient, aggregation with given weights;
- :mod:`~graphattn.nn.attention.explain`: PyG ``Explainer`` edge masks.
"""
# the registration order is the order of SCORES.names()
# isort: off
from graphattn.nn.attention.dot import DotScore
from graphattn.nn.attention.additive import AdditiveScore
from graphattn.nn.attention.gat import GATScore
from graphattn.nn.attention.bilinear import BilinearScore
from graphattn.nn.attention.aft import AFTScore
# isort: on
from graphattn.nn.attention.layer import GraphSelfAttention
from graphattn.nn.attention.score import SCORES, EdgeScore

__all__ = ["GraphSelfAttention", "EdgeScore", "SCORES", "DotScore", "AdditiveScore", "GATScore", "BilinearScore",
           "AFTScore", "LAYER_SCORES"]

#: the built-in scores' names (``SCORES.names()`` also lists scores registered later)
LAYER_SCORES = SCORES.names()
