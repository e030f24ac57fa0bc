"""Models built from :mod:`graphattn.nn` layers: the GraphTransformer backbone, graph and node
classifiers, the probability ensemble, the standardised regressor and its mean ensemble, the molecule pretrainer and the PyG baselines."""
from graphattn.nn.features import FeatureEncoder, GraphFeatureNorm
from graphattn.nn.models.baselines import ConvBaseline, MPNNBaseline
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.nn.models.graph_transformer import GraphClassifier, GraphTransformer
from graphattn.nn.models.node_classifier import NodeClassifier
from graphattn.nn.models.pretrainer import MoleculePretrainer
from graphattn.nn.models.regression import MeanEnsemble, StandardizedRegressor, target_statistics

__all__ = [
    "GraphTransformer",
    "GraphClassifier",
    "NodeClassifier",
    "FeatureEncoder",
    "GraphFeatureNorm",
    "ProbabilityEnsemble",
    "StandardizedRegressor",
    "MeanEnsemble",
    "target_statistics",
    "MoleculePretrainer",
    "ConvBaseline",
    "MPNNBaseline",
]
