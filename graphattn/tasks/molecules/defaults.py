"""The defaults of the molecule tasks, in one place and without heavy imports (the command line's
``--help`` reads them without importing torch): the splits, the baselines, the training recipe of
``graphattn train`` (:data:`DEFAULTS`) and of ``graphattn pretrain`` (:data:`PRETRAIN_DEFAULTS`)."""

from graphattn.tasks.molecules.recipe import PE_KINDS, MoleculeRecipe

__all__ = ["SPLITS", "BASELINES", "PE_KINDS", "DEFAULTS", "defaults_for", "PRETRAIN_DEFAULTS", "ARCH_KEYS"]
SPLITS = ("scaffold", "random", "balanced_scaffold", "deepchem_scaffold")


BASELINES = ("none", "gine", "gat")


#: the default recipe (:class:`~graphattn.tasks.molecules.recipe.MoleculeRecipe`) as a plain dict: the
#: keys ``graphattn train`` and the benchmarks' ``--set KEY=VALUE`` take; the results tables use exactly these.
#: ``descriptors`` is None: the task type's set (:data:`~graphattn.tasks.molecules.recipe.DEFAULT_DESCRIPTORS`),
#: so a regression recipe built from these keys gets the regression default
DEFAULTS = {**MoleculeRecipe().to_dict(), "descriptors": None}


def defaults_for(task_type: str = "classification", **changes) -> dict:
    """:data:`DEFAULTS` with ``changes``, resolved for ``task_type`` (a ``descriptors`` of None becomes
    that task type's set): the recipe a run of that task type really trains with."""
    return MoleculeRecipe.from_dict({**DEFAULTS, **changes, "task_type": task_type}).to_dict()


#: ``graphattn pretrain`` defaults; the architecture keys match the fine-tuning defaults of
#: :data:`graphattn.tasks.molecules.defaults.DEFAULTS`, so ``train tox21 --init`` needs no other flag.
PRETRAIN_DEFAULTS = dict(epochs=20, lr=1e-3, weight_decay=0.0, batch_size=128, patience=None, hidden=64, layers=3,
                         heads=4, dropout=0.1, global_tokens=1, pe_dim=8, pe_kind="laplacian", local_mpnn=None,
                         mask_rate=0.15, atom_weight=1.0, val_fraction=0.05)


#: Hyper-parameters that define the backbone's shape: fixed by the pretrained checkpoint.
ARCH_KEYS = ("hidden", "layers", "heads", "global_tokens", "pe_dim", "pe_kind", "local_mpnn", "hops")
