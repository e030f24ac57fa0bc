"""graphattn: graph self-attention layers and models for PyTorch Geometric."""
from graphattn import functional
from graphattn.functional import dense_attention, edge_attention
from graphattn.loader.neighbor_loader import NeighborLoader
from graphattn.nn import (AddLaplacianPE, AddRandomWalkPE, ClusteredAttention, GlobalTokens, GraphSelfAttention,
                          GraphTransformerBlock, LapPEEncoder, LinearGlobalAttention, ReducedKeyAttention,
                          SynthesizerAttention, TokenGraph, make_global_attention, sinusoidal_pe, sinusoidal_pe_2d)
from graphattn.nn.models import (FeatureEncoder, GraphClassifier, GraphFeatureNorm, GraphTransformer,
                                 MoleculePretrainer, NodeClassifier, ProbabilityEnsemble)
from graphattn.nn.variants import (GLOBAL_ATTNS, NORMALIZATIONS, cluster_graph, edge_normalize, linear_attention,
                                   normalized_edge_attention)
from graphattn.ops.csr import EdgeCSR, to_csr
from graphattn.patterns import image_graph, images_to_batch, sequence_graph, sequences_to_batch
from graphattn.utils.validation import refuse_scripting as _refuse_scripting
from graphattn.version import __version__

# torch.jit.script: one clear NotImplementedError (as trace / export give) instead of TorchScript's own
_refuse_scripting(GraphSelfAttention, GraphTransformerBlock, GlobalTokens, FeatureEncoder, GraphTransformer,
                  NodeClassifier, GraphClassifier, GraphFeatureNorm, ProbabilityEnsemble, MoleculePretrainer,
                  LapPEEncoder, LinearGlobalAttention, ReducedKeyAttention, ClusteredAttention, SynthesizerAttention)

__all__ = [
    "__version__",
    "functional",
    "GraphSelfAttention",
    "GraphTransformerBlock",
    "GlobalTokens",
    "TokenGraph",
    "FeatureEncoder",
    "GraphTransformer",
    "NodeClassifier",
    "GraphClassifier",
    "GraphFeatureNorm",
    "ProbabilityEnsemble",
    "MoleculePretrainer",
    "AddLaplacianPE",
    "AddRandomWalkPE",
    "LapPEEncoder",
    "sinusoidal_pe",
    "sinusoidal_pe_2d",
    "sequence_graph",
    "image_graph",
    "sequences_to_batch",
    "images_to_batch",
    "LinearGlobalAttention",
    "ReducedKeyAttention",
    "ClusteredAttention",
    "SynthesizerAttention",
    "make_global_attention",
    "cluster_graph",
    "edge_normalize",
    "normalized_edge_attention",
    "linear_attention",
    "NORMALIZATIONS",
    "GLOBAL_ATTNS",
    "EdgeCSR",
    "NeighborLoader",
    "to_csr",
    "dense_attention",
    "edge_attention",
]
