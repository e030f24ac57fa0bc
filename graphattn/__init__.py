"""graphattn: graph self-attention layers and models for PyTorch Geometric."""
__version__ = "0.1.0"

from .csr import EdgeCSR, to_csr

__all__ = ["EdgeCSR", "to_csr", "__version__"]
