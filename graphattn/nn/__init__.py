"""Layers and models: graph self-attention, transformer blocks, global tokens, positional
encodings, efficient attention variants (:mod:`graphattn.nn.variants`) and the node / graph
models (:mod:`graphattn.nn.models`)."""
