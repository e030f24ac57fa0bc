"""``AddMolDescriptors``: molecule-level RDKit descriptors as a PyG transform (the descriptors themselves:
:func:`graphattn.data.descriptors.mol_descriptors`)."""
from __future__ import annotations

import hashlib
from typing import Optional, Sequence

from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from graphattn.data.descriptors import NORMALIZED_PREFIX, descriptor_names, mol_descriptors
from graphattn.data.featurize import parse_smiles

__all__ = ["AddMolDescriptors"]


class AddMolDescriptors(BaseTransform):
    """PyG transform: ``data.mol_desc`` ``(1, D)`` from ``data.smiles`` (the descriptors of
    :func:`graphattn.data.descriptors.mol_descriptors`). It sets the attribute on the graph it is given
    and returns that graph (no copy, unlike PyG's ``BaseTransform.__call__``).

    Args:
        names (sequence of str, optional): descriptors to compute (default: all of the
            installed RDKit's, :func:`descriptor_names`).

    Its ``repr`` names the RDKit version and a hash of ``names``, so a dataset cache built
    with it (the cache key includes the ``pre_transform``'s repr) is rebuilt when either
    changes.
    """

    def __init__(self, names: Optional[Sequence[str]] = None):
        self.names = descriptor_names() if names is None else list(names)

    def __call__(self, data: Data) -> Data:
        return self.forward(data)  # in place, as before it was a BaseTransform

    def forward(self, data: Data) -> Data:
        smiles = getattr(data, "smiles", None)
        if not isinstance(smiles, str):
            raise ValueError("AddMolDescriptors needs data.smiles (a str); graphs made by "
                             "graphattn.data.smiles_to_data have it")
        data.mol_desc = mol_descriptors(parse_smiles(smiles), self.names)  # (1, D)
        return data

    def __repr__(self) -> str:
        import rdkit  # optional dependency: only for the repr (the descriptors import it themselves)

        digest = hashlib.sha256("\n".join(self.names).encode()).hexdigest()[:10]
        extra = ""
        if any(n.startswith(NORMALIZED_PREFIX) for n in self.names):  # its CDFs are descriptastorus'
            from importlib.metadata import version

            extra = f", descriptastorus={version('descriptastorus')}"
        return f"{type(self).__name__}(rdkit={rdkit.__version__}{extra}, D={len(self.names)}, names={digest})"
