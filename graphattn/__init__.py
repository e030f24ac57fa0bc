"""graphattn: graph self-attention layers and models for PyTorch Geometric."""
__version__ = "0.1.0"

from . import functional
from .attention import GraphSelfAttention
from .csr import EdgeCSR, to_csr
from .functional import dense_attention, edge_attention

__all__ = [
    "__version__",
    "functional",
    "GraphSelfAttention",
    "EdgeCSR",
    "to_csr",
    "dense_attention",
    "edge_attention",
]
