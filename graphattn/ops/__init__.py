"""Kernels behind :func:`graphattn.functional.edge_attention`: CSR views of ``edge_index``, the
chunked pure-PyTorch path, dense/SDPA attention, the fused C++ (CPU) and Triton (CUDA) kernels,
normalizations and spectral helpers. Layers live in :mod:`graphattn.nn`; nothing here imports them."""
