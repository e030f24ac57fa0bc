"""graphattn: graph self-attention layers and models for PyTorch Geometric."""
__version__ = "0.1.0"

from graphattn import functional
from graphattn.nn.attention import GraphSelfAttention
from graphattn.nn.block import GraphTransformerBlock
from graphattn.nn.encodings import (AddLaplacianPE, AddRandomWalkPE, LapPEEncoder, sinusoidal_pe,
                                    sinusoidal_pe_2d)
from graphattn.nn.global_tokens import GlobalTokens, TokenGraph
from graphattn.nn.models.graph_transformer import (FeatureEncoder, GraphClassifier, GraphFeatureNorm,
                                                   GraphTransformer, NodeClassifier, ProbabilityEnsemble)
from graphattn.nn.variants import (GLOBAL_ATTNS, NORMALIZATIONS, ClusteredAttention, LinearGlobalAttention,
                                   ReducedKeyAttention, SynthesizerAttention, cluster_graph, edge_normalize,
                                   linear_attention, make_global_attention, normalized_edge_attention)
from graphattn.patterns import image_graph, images_to_batch, sequence_graph, sequences_to_batch
from graphattn.ops.csr import EdgeCSR, to_csr
from graphattn.loader.neighbor_loader import NeighborLoader
from graphattn.functional import dense_attention, edge_attention
from graphattn.tasks.molecules.pretrain import MoleculePretrainer  # the pipeline (pool, run_pretraining, --init) stays in graphattn.tasks.molecules.pretrain
from graphattn.utils.validation import refuse_scripting as _refuse_scripting

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
