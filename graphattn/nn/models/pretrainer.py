"""MoleculePretrainer: a GraphTransformer backbone with the two self-supervised heads of molecule
pretraining (masked atoms, node level; RDKit descriptors, graph level).

The training recipe (pool of unlabelled SMILES, masks, losses, fine-tuning from the backbone) is
:mod:`graphattn.tasks.molecules.pretrain`.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import global_mean_pool

from graphattn.nn.encodings import pe_inputs
from graphattn.nn.features import GraphFeatureNorm
from graphattn.nn.models.graph_transformer import GraphTransformer

__all__ = ["MoleculePretrainer"]


class MoleculePretrainer(nn.Module):
    r"""Backbone + masked-atom head + descriptor head (Hu et al. 2020, node- and graph-level
    pretraining together; GROVER, Rong et al. 2020, chemistry-derived graph targets).

    The masked atoms' encoder outputs are replaced by one learned mask vector; a linear head
    predicts each categorical atom feature of them from their final states, and an MLP on the
    mean-pooled node states regresses the standardised molecule descriptors::

        h = GraphTransformer(x)   (encoder output rows of the masked atoms replaced by m)
        atom_logits = W_a h[mask],   desc = MLP(mean_pool(h))

    Args:
        backbone (dict): :class:`~graphattn.GraphTransformer` kwargs (categorical atom inputs:
            ``node_vocab_sizes`` is required, it sizes the masked-atom head).
        num_descriptors (int): D, size of ``data.mol_desc``.

    ``desc_norm`` standardises the targets (``fit`` it on the training molecules' descriptors first).

    Shapes:
        ``forward(batch, atom_mask)``: a PyG batch of B molecules with N atoms (``x`` ``(N, 9)``
        categorical, ``edge_attr``, Laplacian PE) and ``atom_mask`` bool ``(N,)`` with M set ->
        ``(atom_logits (M, sum(vocab)), desc (B, D))``.
    """

    def __init__(self, backbone: Dict[str, Any], num_descriptors: int):
        super().__init__()

        vocab = backbone.get("node_vocab_sizes")
        if not vocab:
            raise ValueError("masked-atom pretraining needs categorical atom features (node_vocab_sizes)")
        if num_descriptors < 1:
            raise ValueError(f"num_descriptors must be >= 1, got {num_descriptors}")
        self.backbone = GraphTransformer(**backbone)
        C = self.backbone.hidden_channels
        self.vocab_sizes = [int(v) for v in vocab]
        self.mask_vector = nn.Parameter(torch.randn(C) * 0.02)
        self.atom_head = nn.Linear(C, sum(self.vocab_sizes))
        self.desc_norm = GraphFeatureNorm(num_descriptors)
        self.desc_head = nn.Sequential(nn.Linear(C, C), nn.GELU(), nn.Linear(C, num_descriptors))
        self._mask: Optional[Tensor] = None
        # the mask replaces the encoder's output rows: the backbone itself stays a plain
        # GraphTransformer whose state dict fine-tuning loads unchanged
        self.backbone.node_encoder.register_forward_hook(self._apply_mask)

    def _apply_mask(self, module, inputs, out: Tensor) -> Tensor:
        if self._mask is None:
            return out
        return torch.where(self._mask[:, None], self.mask_vector.to(out.dtype), out)

    def forward(self, batch, atom_mask: Tensor) -> Tuple[Tensor, Tensor]:
        if atom_mask.shape != (batch.num_nodes,) or atom_mask.dtype != torch.bool:
            raise ValueError(f"atom_mask must be a bool tensor of shape ({batch.num_nodes},), "
                             f"got {atom_mask.dtype} {tuple(atom_mask.shape)}")
        self._mask = atom_mask
        try:
            h, _ = self.backbone(batch.x, batch.edge_index, batch.edge_attr, batch.batch, num_graphs=batch.num_graphs,
                                 **pe_inputs(batch))
        finally:
            self._mask = None
        g = global_mean_pool(h, batch.batch, size=batch.num_graphs)
        return self.atom_head(h[atom_mask]), self.desc_head(g)

    def atom_loss(self, logits: Tensor, x: Tensor) -> Tensor:
        """Cross-entropy of every categorical column of the masked atoms' features ``x``, summed
        over columns, mean over atoms."""
        if logits.size(0) == 0:
            return logits.sum() * 0.0
        loss = logits.new_zeros(())
        for c, part in enumerate(logits.split(self.vocab_sizes, dim=-1)):
            loss = loss + F.cross_entropy(part, x[:, c].long())
        return loss
