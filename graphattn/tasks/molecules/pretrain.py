"""Self-supervised pretraining of the molecule backbone on unlabelled SMILES, and fine-tuning from it.

Labelled toxicity sets are small (Tox21: 7.8k molecules), unlabelled molecules are not. The
pretext tasks follow the two published findings that matter for a graph encoder: pretrain at
the node *and* the graph level together (Hu et al., "Strategies for Pre-training Graph
Neural Networks", ICLR 2020: node-level or graph-level alone can hurt downstream), and use
chemistry-derived graph-level targets (GROVER, Rong et al. 2020: functional-group / motif
prediction). In one forward pass per batch:

* **masked atoms** (node level): ``mask_rate`` of the atoms (at least one per molecule) have
  their whole input embedding replaced by one learned mask vector (all 9 categorical atom
  features hidden: element, degree, charge, chirality, hybridisation, aromaticity, H count,
  ring, radical electrons; the bonds keep theirs); a linear head predicts each of those
  categories from the atom's final state (cross-entropy summed over the feature columns);
* **molecule descriptors** (graph level): an MLP on the mean-pooled node states regresses the
  ~200 RDKit 2-D descriptors (:mod:`graphattn.data.descriptors`: fragment / functional-group
  counts, logP, TPSA, ring and charge indices, ...), standardised with the statistics of the
  pool's training part (MSE), from the same masked pass. The labels come from RDKit, so any
  SMILES file is training data.

The backbone is exactly :class:`~graphattn.GraphTransformer` with the kwargs of a
:class:`~graphattn.GraphClassifier` (minus its head); :func:`load_pretrained_backbone` copies
it into a new classifier, whose head starts fresh (``graphattn train ... --init PRE.pt``).
PyG has no molecule pretraining (its ``AttentiveFP`` / ``GIN`` examples train from scratch),
hence this module. Training goes through the shared loop :func:`graphattn.train.fit`
(``kind="regression"``: the descriptor MSE is the task loss, the masked-atom loss its
auxiliary term, and the validation descriptor MAE — on fixed validation masks — picks
``best.pt``), so progress bars, atomic checkpoints and ``--resume`` are the same as everywhere
else.
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, Optional, Sequence

import torch
from torch import Tensor

from graphattn.data.molecules import ATOM_FEATURE_NAMES, FEATURIZER_VERSION
from graphattn.nn.models.pretrainer import MoleculePretrainer
from graphattn.tasks.molecules.defaults import ARCH_KEYS, PRETRAIN_DEFAULTS
from graphattn.tasks.molecules.finetune import backbone_kwargs
from graphattn.tasks.molecules.pipeline import model_spec
from graphattn.tasks.molecules.recipe import MoleculeRecipe
from graphattn.train.config import TrainConfig
from graphattn.train.loop import fit
from graphattn.train.runtime import model_device, resolve_device, set_seed

__all__ = ["arch_spec", "sample_atom_mask", "pretrain_forward",
           "masked_atom_accuracy", "run_pretraining"]


def sample_atom_mask(batch_vec: Tensor, num_graphs: int, rate: float,
                     generator: Optional[torch.Generator] = None) -> Tensor:
    """Which atoms to mask.

    Args:
        batch_vec: ``(N,)`` molecule id of every atom; num_graphs: B.
        rate: probability of masking an atom, in (0, 1).
        generator: CPU generator (reproducible masks); None = the global RNG.

    Returns bool ``(N,)``: each atom with probability ``rate``, plus one random atom of every
    molecule that got none (so every molecule has a node-level target). Sampled on the CPU and
    moved to ``batch_vec``'s device."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"mask rate must be in (0, 1), got {rate}")
    n = batch_vec.numel()
    b = batch_vec.cpu()
    mask = torch.rand(n, generator=generator) < rate
    hit = torch.zeros(num_graphs, dtype=torch.bool)
    hit[b[mask]] = True
    # one random atom per molecule without a masked one: the max of random keys per graph
    keys = torch.rand(n, generator=generator)
    best = torch.full((num_graphs,), -1.0).scatter_reduce(0, b, keys, "amax")
    mask |= (keys == best[b]) & ~hit[b]
    return mask.to(batch_vec.device)


def _eval_generator(batch) -> torch.Generator:
    """A generator fixed by the batch's content: validation masks are the same every epoch."""
    key = hashlib.sha256(repr((int(batch.num_nodes), int(batch.num_graphs),
                               batch.x[:64].tolist())).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))


def pretrain_forward(rate: float, atom_weight: float = 1.0):
    """The ``forward`` of :func:`graphattn.train.fit` for :class:`MoleculePretrainer`:
    ``(descriptor predictions, standardised descriptors[, atom_weight * masked-atom loss])``.

    Args:
        rate: masked fraction of atoms; atom_weight: weight of the masked-atom loss (training).
    Training batches draw fresh masks; other splits use masks fixed by the batch's content
    (:func:`_eval_generator`), so validation errors compare across epochs."""

    def forward(model: MoleculePretrainer, batch, split: str = "train"):
        batch = batch.to(model_device(model))
        gen = None if split == "train" else _eval_generator(batch)
        mask = sample_atom_mask(batch.batch, batch.num_graphs, rate, gen)
        atom_logits, desc = model(batch, mask)
        target = model.desc_norm(batch.mol_desc.to(desc.dtype))
        if split == "train":
            return desc, target, atom_weight * model.atom_loss(atom_logits, batch.x[mask])
        return desc, target

    return forward


@torch.no_grad()
def masked_atom_accuracy(model: MoleculePretrainer, loader, rate: float) -> Dict[str, Dict[str, float]]:
    """Per atom feature column: the masked-atom head's accuracy on ``loader`` (with the fixed
    validation masks of :func:`pretrain_forward`, ``rate``) and that of always guessing the
    column's most frequent category there (the chance level): ``{name: {accuracy, majority}}``."""
    model.eval()
    correct = torch.zeros(len(model.vocab_sizes))
    counts = [torch.zeros(v) for v in model.vocab_sizes]
    total = 0
    for batch in loader:
        batch = batch.to(model_device(model))
        mask = sample_atom_mask(batch.batch, batch.num_graphs, rate, _eval_generator(batch))
        logits, _ = model(batch, mask)
        x = batch.x[mask].long().cpu()
        for c, part in enumerate(logits.split(model.vocab_sizes, dim=-1)):
            correct[c] += float((part.argmax(-1).cpu() == x[:, c]).sum())
            counts[c] += torch.bincount(x[:, c], minlength=model.vocab_sizes[c]).float()
        total += x.size(0)
    names = list(ATOM_FEATURE_NAMES)[:len(model.vocab_sizes)]
    if total == 0:
        return {}
    return {n: {"accuracy": float(correct[c] / total), "majority": float(counts[c].max() / total)}
            for c, n in enumerate(names)}


# ----------------------------------------------------------------------------- training
def arch_spec(hp: Dict[str, Any]) -> Dict[str, Any]:
    """The backbone kwargs of a pretraining recipe (its architecture keys and dropout)."""
    arch = MoleculeRecipe.from_dict({k: hp[k] for k in (*ARCH_KEYS, "dropout") if k in hp})
    spec = model_spec("none", 1, arch)
    return backbone_kwargs(spec.kwargs)


def run_pretraining(graphs: Sequence, hp: Dict[str, Any], *, seed: int = 0, out_dir=None, resume: bool = False,
                    meta: Optional[Dict[str, Any]] = None, progress: bool = True, log=print,
                    device=None) -> Dict[str, Any]:
    """Pretrain a :class:`MoleculePretrainer` on ``graphs`` with :func:`graphattn.train.fit`.

    Args:
        graphs: molecules with ``mol_desc`` (from :func:`~graphattn.tasks.molecules.pretrain_data.molecule_pool`).
        hp: :data:`PRETRAIN_DEFAULTS` overrides; ``val_fraction`` of the molecules (seeded by
            ``seed``) are held out for the validation losses and the masked-atom accuracy.
        device: :func:`graphattn.train.resolve_device` (default: the GPU when there is one).
        seed, out_dir, resume, meta, progress, log: as in :func:`graphattn.train.fit`
            (``--resume`` with another seed or ``val_fraction`` is refused: another split).

    ``out_dir/best.pt`` (lowest validation descriptor MAE) is what ``graphattn train --init``
    loads. Returns the summary (counts, best epoch, validation MAE, masked-atom accuracy,
    history, meta) and the trained ``model``."""
    from torch_geometric.loader import DataLoader

    hp = {**PRETRAIN_DEFAULTS, **hp}
    graphs = list(graphs)
    if len(graphs) < 2:
        raise ValueError(f"pretraining needs at least 2 molecules, got {len(graphs)}")
    if not all(hasattr(g, "mol_desc") for g in graphs):
        raise ValueError("every molecule needs data.mol_desc (RDKit descriptors): build the pool with molecule_pool")
    D = graphs[0].mol_desc.size(-1)
    gen = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(len(graphs), generator=gen).tolist()
    n_val = min(len(graphs) - 1, max(1, round(hp["val_fraction"] * len(graphs))))
    parts = {"train": [graphs[i] for i in perm[n_val:]], "val": [graphs[i] for i in perm[:n_val]]}
    bb = arch_spec(hp)
    # "split" is not resumable: another seed / val_fraction would validate on trained molecules
    meta = {"pipeline": "pretrain", "backbone": bb, "featurizer_version": FEATURIZER_VERSION,
            "split": {"seed": int(seed), "val_fraction": float(hp["val_fraction"]), "molecules": len(graphs)},
            "pe": {"kind": hp["pe_kind"], "k": hp["pe_dim"]}, "num_descriptors": D,
            "hparams": {k: hp[k] for k in PRETRAIN_DEFAULTS}, **(meta or {})}
    set_seed(seed)
    model = MoleculePretrainer(bb, D)
    model.to(resolve_device(device))
    model.desc_norm.fit(torch.cat([g.mol_desc for g in parts["train"]]))
    loaders = {s: DataLoader(p, batch_size=hp["batch_size"], shuffle=(s == "train")) for s, p in parts.items()}
    config = TrainConfig.from_recipe(hp, kind="regression", seed=seed, resume=resume, progress=progress)
    res = fit(model, loaders, pretrain_forward(hp["mask_rate"], hp["atom_weight"]), config, out_dir=out_dir, meta=meta,
              log=log)
    acc = masked_atom_accuracy(model, loaders["val"], hp["mask_rate"])
    return {"best_epoch": res["best_epoch"], "epochs_run": res["epochs_run"],
            "seconds_per_epoch": res["seconds_per_epoch"], "counts": {s: len(p) for s, p in parts.items()},
            "num_parameters": sum(p.numel() for p in model.backbone.parameters()),
            "val_descriptor_mae": res["history"][res["best_epoch"] - 1]["val"].get("mae")
            if res.get("best_epoch") else None,
            "val_masked_atom": acc,
            "history": [{k: (v if not isinstance(v, dict) else {m: v.get(m) for m in ("mae", "rmse", "loss")})
                         for k, v in h.items()} for h in res["history"]],
            "meta": meta, "model": model}
