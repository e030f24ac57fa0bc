"""The defaults of the molecule tasks, in one place and without heavy imports (the command line's
``--help`` reads them without importing torch): the splits, the baselines, the training recipe of
``graphattn train`` (:data:`DEFAULTS`) and of ``graphattn pretrain`` (:data:`PRETRAIN_DEFAULTS`)."""

__all__ = ["SPLITS", "BASELINES", "PE_KINDS", "DEFAULTS", "PRETRAIN_DEFAULTS", "ARCH_KEYS"]
SPLITS = ("scaffold", "random", "balanced_scaffold", "deepchem_scaffold")


#: positional encodings of the molecule pipeline: Laplacian eigenvectors (read by a sign-flipping
#: LapPE encoder), random-walk return probabilities (RWSE, read by a linear layer) or relative
#: random-walk probabilities of every attended pair (RRWP, GRIT's; edge features of every layer)
PE_KINDS = ("laplacian", "rwse", "rrwp")


BASELINES = ("none", "gine", "gat")


#: Defaults for Tox21-sized sets on a small CPU (early stopping usually after 20-40 epochs), chosen on
#: validation ROC-AUC (docs/molecules.md, "How the defaults were chosen"); the results tables there
#: use exactly these.
DEFAULTS = dict(epochs=60, lr=1e-3, weight_decay=0.0, batch_size=64, patience=12, hidden=64, layers=3,
                heads=4, dropout=0.25, global_tokens=1, pe_dim=8, pe_kind="laplacian", readout="mean",
                local_mpnn=None, descriptors=True, schedule="constant", warmup=0, hops=1)


#: ``graphattn pretrain`` defaults; the architecture keys match the fine-tuning defaults of
#: :data:`graphattn.tasks.molecules.defaults.DEFAULTS`, so ``train tox21 --init`` needs no other flag.
PRETRAIN_DEFAULTS = dict(epochs=20, lr=1e-3, weight_decay=0.0, batch_size=128, patience=None, hidden=64, layers=3,
                         heads=4, dropout=0.1, global_tokens=1, pe_dim=8, pe_kind="laplacian", local_mpnn=None,
                         mask_rate=0.15, atom_weight=1.0, val_fraction=0.05)


#: Hyper-parameters that define the backbone's shape: fixed by the pretrained checkpoint.
ARCH_KEYS = ("hidden", "layers", "heads", "global_tokens", "pe_dim", "pe_kind", "local_mpnn", "hops")
