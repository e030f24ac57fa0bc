"""Datasets: molecules (the named MoleculeNet sets and ZINC-12k, any SMILES CSV) and social networks.

Raw files are read from the data root (``root=`` > ``$GRAPHATTN_DATA`` > checkout
``datasets/`` > ``~/.cache/graphattn``) or downloaded; processed caches go to
:func:`cache_root` (``$GRAPHATTN_CACHE`` or ``~/.cache/graphattn``). RDKit is imported only
when molecules are featurized.
"""
from graphattn.data.descriptors import descriptor_names, mol_descriptors
from graphattn.data.download import DataFileError, cache_root, data_root, find_file
from graphattn.data.moleculenet import (MOLECULENET, SIDER_TASKS, TOX21_TASKS, TOXICITY_DATASETS, MoleculeNetDataset,
                                        MoleculeNetSet, ToxicityDataset, moleculenet_names)
from graphattn.data.molecules import (ATOM_FEATURE_DIMS, ATOM_FEATURE_NAMES, BOND_FEATURE_DIMS, BOND_FEATURE_NAMES,
                                      FEATURIZER_VERSION, DuplicateSmilesWarning, InvalidSmilesError,
                                      InvalidSmilesWarning, MoleculeCSVDataset, TaskColumnWarning, mol_to_data,
                                      parse_smiles, smiles_to_data)
from graphattn.data.rawio import canonical_label
from graphattn.data.smiles_table import find_column, read_csv_table
from graphattn.data.social import (SOCIAL_NODE_DATASETS, load_cora, load_karate, load_musae, load_planetoid,
                                   load_social_node_dataset, random_walk_pe, stratified_masks, structural_node_features)
from graphattn.data.splits import (balanced_scaffold_split, murcko_scaffold, random_split, scaffold_groups,
                                   scaffold_split, stratified_split)
from graphattn.data.tu import (SOCIAL_GRAPH_DATASETS, GraphList, add_structural_features, load_social_graph_dataset,
                               load_tu_dataset, load_tu_folder, load_tu_folds, load_tu_text, stratified_folds)
from graphattn.data.zinc import build_zinc_subset, zinc_target

__all__ = [
    "DataFileError", "cache_root", "data_root", "find_file", "canonical_label",
    "descriptor_names", "mol_descriptors",
    "ATOM_FEATURE_DIMS", "ATOM_FEATURE_NAMES", "BOND_FEATURE_DIMS", "BOND_FEATURE_NAMES",
    "FEATURIZER_VERSION", "MOLECULENET", "MoleculeNetSet", "MoleculeNetDataset", "moleculenet_names",
    "TOX21_TASKS", "SIDER_TASKS", "TOXICITY_DATASETS", "InvalidSmilesError",
    "InvalidSmilesWarning", "MoleculeCSVDataset", "TaskColumnWarning", "ToxicityDataset", "find_column",
    "DuplicateSmilesWarning",
    "mol_to_data", "parse_smiles", "read_csv_table", "smiles_to_data",
    "SOCIAL_NODE_DATASETS", "load_cora", "load_karate", "load_musae", "load_planetoid", "load_social_node_dataset",
    "random_walk_pe", "stratified_masks", "structural_node_features",
    "SOCIAL_GRAPH_DATASETS", "GraphList", "add_structural_features", "load_social_graph_dataset",
    "load_tu_dataset", "load_tu_folder", "load_tu_folds", "load_tu_text", "stratified_folds",
    "balanced_scaffold_split", "murcko_scaffold", "random_split", "scaffold_groups", "scaffold_split",
    "stratified_split", "build_zinc_subset", "zinc_target",
]

#: transforms that moved to :mod:`graphattn.transforms`, still importable from here (deprecated)
_MOVED = {"AddMolDescriptors", "AddHopEdges", "hop_edges"}


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module 'graphattn.data' has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(f"graphattn.data.{name} moved to graphattn.transforms.{name}", DeprecationWarning, stacklevel=2)
    # by name, at first use: graphattn.transforms sits above graphattn.data
    value = globals()[name] = getattr(importlib.import_module("graphattn.transforms"), name)  # warned once
    return value
