"""graphattn: graph self-attention layers and models for PyTorch Geometric."""
__version__ = "0.1.0"

from . import functional
from .attention import GraphSelfAttention
from .block import GraphTransformerBlock
from .global_tokens import GlobalTokens, TokenGraph
from .models import FeatureEncoder, GraphClassifier, GraphTransformer, NodeClassifier
from .csr import EdgeCSR, to_csr
from .functional import dense_attention, edge_attention

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
    "EdgeCSR",
    "to_csr",
    "dense_attention",
    "edge_attention",
]
