"""Datasets: molecules (MoleculeNet toxicity sets, any SMILES CSV) and social networks."""
from .download import DataFileError, data_root, find_file

__all__ = ["DataFileError", "data_root", "find_file"]
