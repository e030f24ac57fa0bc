"""Datasets: molecules (MoleculeNet toxicity sets, any SMILES CSV) and social networks.

Raw files are read from the data root (``root=`` > ``$GRAPHATTN_DATA`` > checkout
``datasets/`` > ``~/.cache/graphattn``) or downloaded; processed caches go to
:func:`cache_root` (``$GRAPHATTN_CACHE`` or ``~/.cache/graphattn``). RDKit is imported only
when molecules are featurized.
"""
from .download import DataFileError, cache_root, data_root, find_file
from .molecules import (ATOM_FEATURE_DIMS, ATOM_FEATURE_NAMES, BOND_FEATURE_DIMS, BOND_FEATURE_NAMES,
                        FEATURIZER_VERSION, SIDER_TASKS, TOXICITY_DATASETS, InvalidSmilesError,
                        InvalidSmilesWarning, MoleculeCSVDataset, ToxicityDataset, mol_to_data,
                        parse_smiles, smiles_to_data)
from .splits import (balanced_scaffold_split, murcko_scaffold, random_split, scaffold_groups,
                     scaffold_split, stratified_split)

__all__ = [
    "DataFileError", "cache_root", "data_root", "find_file",
    "ATOM_FEATURE_DIMS", "ATOM_FEATURE_NAMES", "BOND_FEATURE_DIMS", "BOND_FEATURE_NAMES",
    "FEATURIZER_VERSION", "SIDER_TASKS", "TOXICITY_DATASETS", "InvalidSmilesError",
    "InvalidSmilesWarning", "MoleculeCSVDataset", "ToxicityDataset", "mol_to_data", "parse_smiles",
    "smiles_to_data",
    "balanced_scaffold_split", "murcko_scaffold", "random_split", "scaffold_groups", "scaffold_split",
    "stratified_split",
]
