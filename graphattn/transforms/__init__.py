"""Transforms that add encodings and edges to a graph once, as PyG's ``BaseTransform`` subclasses
(usable as ``transform=`` / ``pre_transform=`` of any PyG dataset). The encoders that read what they
add stay in :mod:`graphattn.nn`.

- :class:`AddLaplacianPE`, :class:`AddRandomWalkPE`: positional and structural encodings;
- :class:`AddHopEdges` (and :func:`hop_edges`): attention edges between nodes up to K hops apart;
- :class:`AddRRWP` (and :func:`relative_random_walk`): relative random-walk probabilities of the
  attended pairs (GRIT's attention features);
- :class:`AddMolDescriptors`: RDKit descriptors of a molecule graph.
"""
from graphattn.transforms.descriptors import AddMolDescriptors
from graphattn.transforms.hops import AddHopEdges, hop_edges
from graphattn.transforms.positional import AddLaplacianPE, AddRandomWalkPE
from graphattn.transforms.rrwp import AddRRWP, relative_random_walk

__all__ = ["AddLaplacianPE", "AddRandomWalkPE", "AddHopEdges", "hop_edges", "AddMolDescriptors", "AddRRWP",
           "relative_random_walk"]
