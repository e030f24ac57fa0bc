"""graphattn: graph self-attention layers and models for PyTorch Geometric.

The public names are loaded on first use (PEP 562): ``from graphattn import GraphSelfAttention`` and
``graphattn.GraphSelfAttention`` work as usual, while ``import graphattn`` alone, and so the command
line's ``--help``, does not import torch.
"""
import importlib

from graphattn.version import __version__

#: the module that defines each public name
_HOME = {
    **dict.fromkeys(["AddLaplacianPE", "AddRandomWalkPE"], "graphattn.transforms"),
    **dict.fromkeys(["GraphSelfAttention", "GraphTransformerBlock", "GlobalTokens", "TokenGraph", "LapPEEncoder",
                     "sinusoidal_pe", "sinusoidal_pe_2d", "LinearGlobalAttention", "ReducedKeyAttention", "ClusteredAttention", "SynthesizerAttention",
                     "CompressedKeyAttention", "FourierMixing", "SinkhornAttention", "make_global_attention"],
                    "graphattn.nn"),
    **dict.fromkeys(["FeatureEncoder", "GraphTransformer", "NodeClassifier", "GraphClassifier", "GraphFeatureNorm",
                     "ProbabilityEnsemble", "MoleculePretrainer", "StandardizedRegressor", "MeanEnsemble"], "graphattn.nn.models"),
    **dict.fromkeys(["cluster_graph", "edge_normalize", "normalized_edge_attention", "linear_attention",
                     "NORMALIZATIONS", "GLOBAL_ATTNS"], "graphattn.nn.variants"),
    **dict.fromkeys(["sequence_graph", "image_graph", "sequences_to_batch", "images_to_batch"], "graphattn.patterns"),
    **dict.fromkeys(["EdgeCSR", "to_csr"], "graphattn.ops.csr"),
    **dict.fromkeys(["NeighborLoader"], "graphattn.loader.neighbor_loader"),
    **dict.fromkeys(["dense_attention", "edge_attention"], "graphattn.functional"),
    **dict.fromkeys(["load", "MoleculeModel", "SocialModel", "Predictions"], "graphattn.tasks.trained"),
}

__all__ = ["__version__", "functional", *_HOME]


def __getattr__(name: str):
    if name == "functional":
        return importlib.import_module("graphattn.functional")
    if name not in _HOME:
        raise AttributeError(f"module 'graphattn' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
