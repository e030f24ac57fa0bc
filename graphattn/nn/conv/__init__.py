"""PyG's attention convs with their exact interface, computed by graphattn's kernels: change
``from torch_geometric.nn import GATConv`` to ``from graphattn.nn import GATConv`` (likewise
``GATv2Conv``, ``TransformerConv``). Each is a configuration of
:class:`~graphattn.nn.attention.GraphSelfAttention`; see docs/coming-from-pyg.md."""
from graphattn.nn.conv.gat_conv import GATConv
from graphattn.nn.conv.gatv2_conv import GATv2Conv
from graphattn.nn.conv.transformer_conv import TransformerConv

__all__ = ["GATConv", "GATv2Conv", "TransformerConv"]
