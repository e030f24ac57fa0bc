"""Per-task atom attributions: attention × gradient rollout (Chefer et al. 2021).

Attention rollout (:func:`graphattn.tasks.molecules.viz.attention_rollout`) shows where the
model looks, the same picture for every task. Here each layer's attention weights are weighed
by how much the chosen task's logit ``y`` changes with them: per layer the head mean of
``(α ⊙ ∂y/∂α)⁺`` (Chefer, Gur & Wolf 2021, "Generic attention-model explainability"), rolled
out through the layers with the residual as the rollout does (:func:`gradient_rollout`).

The edge kernels compute a layer's output without its ``(E, H)`` weights as a tensor of the
output's autograd graph, so ``∂y/∂α`` cannot be read off the returned weights; it is read
through the layer's public ``attn_bias`` argument instead: a zero ``(E, H)`` bias ``b`` is added to every layer's scores
(the output is unchanged) and, with softmax attention, ``∂y/∂b_e = α_e (g_e − ḡ_i)``, where
``g_e = ∂y/∂α_e`` and ``ḡ_i = Σ_e' α_e' g_e' = ⟨∂y/∂o_i, o_i⟩`` for the layer's per-head
output ``o_i`` of target ``i``; so ``α ⊙ g = ∂y/∂b + α · ⟨∂y/∂o, o⟩[target]``, exact, from
one backward pass.

What it shows is what attention carried towards the logit: with ``readout="token"`` all the
prediction reads has passed through attention; with mean/sum/max pooling an atom's own state
also reaches the readout directly, past every attention map.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from graphattn.nn.block import GraphTransformerBlock
from graphattn.nn.models.ensemble import ProbabilityEnsemble
from graphattn.nn.models.regression import MeanEnsemble
from graphattn.tasks.molecules.viz import (base_model, collect_attention, ensemble_mean, molecule_logits, prediction,
                                           readout_scores)

__all__ = ["collect_attention_gradients", "attention_gradients", "gradient_rollout", "molecule_attribution"]


@dataclass
class AttentionProbe:
    """One layer's record: the zero score bias added (``(E, H)``, requires grad), the layer's
    output ``(N, H*C)`` (in the autograd graph) and its ``edge_index`` ``(2, E)`` and
    detached weights ``alpha`` ``(E, H)`` (filled in during the forward pass)."""
    heads: int
    bias: Optional[Tensor] = None
    out: Optional[Tensor] = None
    edge_index: Optional[Tensor] = None
    alpha: Optional[Tensor] = None


#: what the identity of the module docstring needs of a layer: softmax attention whose output
#: is the concatenation of the heads' attention outputs, with no other term (a block's layer is);
#: options a layer does not have count as met
LAYER_NEEDS = (("normalization", "softmax"), ("concat", True), ("root_weight", False), ("residual", False),
               ("beta", False), ("out_bias", False), ("add_self_loops", False))


def _check_layer(layer: nn.Module) -> None:
    """ValueError naming the options of ``layer`` that :data:`LAYER_NEEDS` rules out."""
    def met(value, want) -> bool:
        return value == want if isinstance(value, (bool, str)) else value is None and want is False

    bad = [f"{k}={getattr(layer, k)!r}" for k, want in LAYER_NEEDS
           if hasattr(layer, k) and not met(getattr(layer, k), want)]
    if bad:
        raise ValueError(f"attention × gradient needs softmax attention whose output is the concatenated heads "
                         f"alone; this layer has {', '.join(bad)}")


@contextmanager
def collect_attention_gradients(model: nn.Module) -> Iterator[List[AttentionProbe]]:
    """Inside the ``with`` block, each forward pass of ``model`` appends one
    :class:`AttentionProbe` per :class:`~graphattn.GraphTransformerBlock`, in layer order; pass
    them with the output to :func:`attention_gradients`. The output is the model's own (a zero
    bias is added to the scores, which moves the layers off the SDPA path onto the fused or
    chunked kernel: the same attention)."""
    probes: List[AttentionProbe] = []
    handles = []

    def add_bias(layer, args, kwargs):
        edge_index = args[1] if len(args) > 1 else kwargs["edge_index"]
        x = args[0][0] if isinstance(args[0], (tuple, list)) else args[0]
        if not (isinstance(edge_index, Tensor) and edge_index.layout == torch.strided and edge_index.dim() == 2):
            raise ValueError("attention × gradient needs the layers' edge_index as a (2, E) tensor")
        probe = AttentionProbe(layer.heads)
        probe.bias = torch.zeros(edge_index.size(1), layer.heads, dtype=x.dtype, device=x.device,
                                 requires_grad=True)  # (E, H)
        given = kwargs.get("attn_bias")
        probes.append(probe)
        return args, {**kwargs, "attn_bias": probe.bias if given is None else given + probe.bias}

    def keep(layer, args, kwargs, output):
        probe = probes[-1]
        probe.out, (probe.edge_index, probe.alpha) = output[0], output[1]
        return output

    with collect_attention(model):  # the blocks ask their layer for the weights
        for m in model.modules():
            if isinstance(m, GraphTransformerBlock):
                _check_layer(m.attn)
                handles.append(m.attn.register_forward_pre_hook(add_bias, with_kwargs=True))
                handles.append(m.attn.register_forward_hook(keep, with_kwargs=True))
        try:
            with torch.enable_grad():
                yield probes
        finally:
            for h in handles:
                h.remove()


def attention_gradients(probes: Sequence[AttentionProbe], output: Tensor) -> List[Tuple[Tensor, Tensor]]:
    """``(edge_index, α ⊙ ∂output/∂α)`` per layer, each ``(E, H)`` (not clamped), for a scalar
    ``output`` of the forward pass that filled ``probes``."""
    if output.numel() != 1:
        raise ValueError(f"attention_gradients needs a scalar output (one task of one molecule), "
                         f"got shape {tuple(output.shape)}")
    tensors = [p.bias for p in probes] + [p.out for p in probes]
    grads = torch.autograd.grad(output.reshape(()), tensors, allow_unused=True)
    L = len(probes)
    res = []
    for p, g_bias, g_out in zip(probes, grads[:L], grads[L:]):
        if g_bias is None or g_out is None:  # a layer the output does not depend on
            res.append((p.edge_index, torch.zeros_like(p.alpha)))
            continue
        N, H = p.out.size(0), p.heads
        g_mean = (g_out.view(N, H, -1) * p.out.detach().view(N, H, -1)).sum(-1)  # (N, H): ⟨∂y/∂o, o⟩
        res.append((p.edge_index, g_bias + p.alpha * g_mean[p.edge_index[1]]))  # (E, H)
    return res


def gradient_rollout(relevances: Sequence[Tuple[Tensor, Tensor]], num_nodes: int,
                     residual: float = 0.5) -> Tensor:
    r"""Rollout of per-layer relevances ``(edge_index, α ⊙ ∂y/∂α)`` (``(E, H)`` each).

    Per layer ``Ā[i, j]`` = mean over heads of ``(α ⊙ ∂y/∂α)⁺`` on edge j -> i, divided by its
    largest row sum (each layer counts alike, whatever the logit's scale; the rows keep their
    relative size: a target the output depends on more weighs more);
    ``Â = residual·I + (1 - residual)·Ā``; ``R = Â_L ⋯ Â_1 - residual^L·I``: the part of the
    residual-only path, the same for every node, is removed, so ``R[i, j]`` is the relevance
    carried by attention from input node j to node i. Dense ``(n, n)``: molecule-sized graphs.
    """
    eye = torch.eye(num_nodes, dtype=torch.float64)
    R = eye.clone()
    for edge_index, rel in relevances:
        A = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
        A.index_put_((edge_index[1].cpu(), edge_index[0].cpu()), rel.double().clamp_min(0).mean(-1).cpu(),
                     accumulate=True)  # (n, n): target row, source column
        A = A / A.sum(-1).max().clamp_min(1e-300)
        R = (residual * eye + (1 - residual) * A) @ R
    return R - residual ** len(relevances) * eye


def molecule_attribution(model: nn.Module, data, task: int, residual: float = 0.5) -> Tuple[Tensor, Tensor]:
    """Per-task probabilities (a regressor: values) ``(T,)`` and the atom attributions ``(N,)`` in [0, 1]
    for task number ``task`` of one molecule: :func:`gradient_rollout` of the task's logit (value), read as
    :func:`~graphattn.tasks.molecules.viz.molecule_attention` reads the rollout (the global
    tokens' rows for ``readout="token"``, else the mean of the atom rows), scaled so the most
    relevant atom is 1 (all 0 when no attention path raises the logit). A
    :class:`~graphattn.ProbabilityEnsemble` gives its probabilities and the mean of its members'
    attributions (each scaled to max 1 first), rescaled to max 1."""
    T = int(getattr(model, "num_tasks", 0) or 0)
    if isinstance(task, bool) or not isinstance(task, int) or not (0 <= task < T or T == 0):
        raise ValueError(f"task must be a task number in [0, {T}), got {task!r}")
    if isinstance(model, (ProbabilityEnsemble, MeanEnsemble)):
        return ensemble_mean([molecule_attribution(m, data, task, residual) for m in model.members])
    with collect_attention_gradients(model) as probes:
        logits, data = molecule_logits(model, data)
    N = data.num_nodes
    G = getattr(getattr(base_model(model), "backbone", None), "num_global_tokens", 0) or 0
    R = gradient_rollout(attention_gradients(probes, logits[0, task]), N + G, residual)
    scores = readout_scores(model, R, N)
    return prediction(model, logits[0].detach()).float().cpu(), (scores / scores.max().clamp_min(1e-12)).cpu()
