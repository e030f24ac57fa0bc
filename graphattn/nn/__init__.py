"""Layers and models: graph self-attention, transformer blocks, global tokens, positional
encodings, efficient attention variants (:mod:`graphattn.nn.variants`) and the node / graph
models (:mod:`graphattn.nn.models`)."""
from graphattn.nn.attention import GraphSelfAttention
from graphattn.nn.block import GraphTransformerBlock
from graphattn.nn.conv import GATConv, GATv2Conv, TransformerConv
from graphattn.nn.encodings import LapPEEncoder, sinusoidal_pe, sinusoidal_pe_2d
from graphattn.nn.global_tokens import GlobalTokens, TokenGraph
from graphattn.nn.models import (ConvBaseline, FeatureEncoder, GraphClassifier, GraphFeatureNorm, GraphTransformer,
                                 MoleculePretrainer, MPNNBaseline, NodeClassifier, ProbabilityEnsemble)
from graphattn.nn.models.regression import MeanEnsemble, StandardizedRegressor
from graphattn.nn.variants import (GLOBAL_ATTNS, ClusteredAttention, CompressedKeyAttention, FourierMixing,
                                   LinearGlobalAttention, ReducedKeyAttention, SinkhornAttention,
                                   SynthesizerAttention, make_global_attention)
from graphattn.transforms import AddLaplacianPE, AddRandomWalkPE  # defined there, kept importable here
from graphattn.utils.validation import refuse_scripting

__all__ = [
    # layers
    "GraphSelfAttention",
    "GraphTransformerBlock",
    # PyG's attention convs, same interface
    "GATConv",
    "GATv2Conv",
    "TransformerConv",
    "GlobalTokens",
    "TokenGraph",
    # positional encodings
    "AddLaplacianPE",
    "AddRandomWalkPE",
    "LapPEEncoder",
    "sinusoidal_pe",
    "sinusoidal_pe_2d",
    # global attention variants
    "LinearGlobalAttention",
    "ReducedKeyAttention",
    "ClusteredAttention",
    "SynthesizerAttention",
    "CompressedKeyAttention",
    "SinkhornAttention",
    "FourierMixing",
    "make_global_attention",
    "GLOBAL_ATTNS",
    # models
    "GraphTransformer",
    "GraphClassifier",
    "NodeClassifier",
    "FeatureEncoder",
    "GraphFeatureNorm",
    "ProbabilityEnsemble",
    "MoleculePretrainer",
    "ConvBaseline",
    "MPNNBaseline",
]

# torch.jit.script: one clear NotImplementedError (as trace / export give) instead of TorchScript's own
refuse_scripting(GraphSelfAttention, GraphTransformerBlock, GlobalTokens, FeatureEncoder, GraphTransformer,
                 NodeClassifier, GraphClassifier, GraphFeatureNorm, ProbabilityEnsemble, MoleculePretrainer,
                 StandardizedRegressor, MeanEnsemble, LapPEEncoder, LinearGlobalAttention, ReducedKeyAttention, ClusteredAttention, SynthesizerAttention,
                 CompressedKeyAttention, FourierMixing, SinkhornAttention)
