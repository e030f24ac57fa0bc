"""Molecule-level RDKit 2-D descriptors as graph features (RDKit imported lazily).

Chemprop (Yang et al. 2019) concatenates ~200 RDKit descriptors to the learned molecule
vector before its feed-forward head (``--features_generator rdkit_2d_normalized``); on the
MoleculeNet toxicity sets this is one of the few additions that helps a message-passing model
without pretraining. PyG has no such featurizer, hence this module.

The descriptors are RDKit's own list (:data:`rdkit.Chem.Descriptors._descList`: molecular
weight, logP, TPSA, ring and atom counts, charge and shape indices, fragment counts, ...),
stored per molecule as ``data.mol_desc`` ``(1, D)`` so that a PyG batch stacks them to
``(B, D)``. Values are compressed with ``sign(v) * log1p(|v|)`` (some, e.g. ``Ipc``, reach
1e15); a descriptor RDKit cannot compute for a molecule (an exception or a non-finite value,
e.g. the partial-charge and BCUT descriptors of molecules with exotic elements) is 0 and
counted; an overflow (``inf``) is the largest compressed float instead. The model standardises the columns with statistics of its training set
(:class:`graphattn.nn.models.graph_transformer.GraphFeatureNorm`), so the raw scale does not matter.

Which descriptors exist depends on the RDKit version; a checkpoint stores the names it was
trained with and :func:`mol_descriptors` computes exactly those (or says which are missing).

The second set, ``rdkit2d_normalized`` (:data:`DESCRIPTOR_SETS`), is chemprop's
``v1_rdkit_2d_normalized``: 200 RDKit descriptors, each passed through its cumulative distribution
fitted on a large reference set of molecules, by the ``descriptastorus`` package chemprop itself uses
(values in [0, 1]; a value it cannot compute is 0, as chemprop sets it). Its names carry the prefix
:data:`NORMALIZED_PREFIX`, so a checkpoint's list of names says which set it was trained with.
"""
from __future__ import annotations

import functools
import math
import sys
import warnings
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from graphattn.ops.spectral import single_thread_blas

__all__ = ["DESCRIPTOR_SETS", "NORMALIZED_PREFIX", "descriptor_names", "mol_descriptors"]

#: the descriptor sets: RDKit's 2-D descriptors (log-compressed; the model standardises them on its
#: training molecules) and chemprop's CDF-normalised ones (descriptastorus)
DESCRIPTOR_SETS = ("rdkit2d", "rdkit2d_normalized")
#: the name prefix of the ``rdkit2d_normalized`` descriptors
NORMALIZED_PREFIX = "rdkit2d_normalized:"


#: descriptors whose cost explodes with molecule size (RDKit's Ipc expands the characteristic
#: polynomial: 0.07 s at 200 atoms, 21 s at 800, minutes above 1,000); above SLOW_MAX_ATOMS
#: atoms they are not computed. MoleculeNet's largest molecules (Tox21/ToxCast/ClinTox <= 136
#: atoms, HIV 222) are below it. ``log1p(Ipc)`` grows about linearly with size (18 at 37 atoms,
#: 233 at 287), so a bigger molecule's Ipc is :data:`SATURATED` (far above any training mean:
#: standardised, the top of the clamp — as its true value would be), not 0, which looked like a
#: small molecule's; ``AvgIpc`` levels off (log1p 0.63 from ~100 atoms on) and is 0, as a
#: descriptor RDKit cannot compute.
_SLOW = frozenset({"Ipc", "AvgIpc"})
SLOW_MAX_ATOMS = 300
#: compressed value of an infinite descriptor (an overflow, e.g. Ipc of a huge molecule) and of
#: Ipc above :data:`SLOW_MAX_ATOMS` atoms: ``log1p`` of the largest float64, sign kept
SATURATED = math.log1p(sys.float_info.max)


def _functions() -> Dict[str, object]:
    from rdkit.Chem import Descriptors  # optional dependency: `import graphattn` works without RDKit

    return dict(Descriptors._descList)


@functools.lru_cache(maxsize=1)
def _normalized_generator():
    from descriptastorus.descriptors import rdNormalizedDescriptors  # optional: chemprop's normalised set only

    gen = rdNormalizedDescriptors.RDKit2DNormalized()
    return gen, {name: i for i, (name, _) in enumerate(gen.columns)}


def descriptor_names(kind: str = "rdkit2d") -> List[str]:
    """The descriptor names of a set (:data:`DESCRIPTOR_SETS`): ``"rdkit2d"``, all RDKit 2-D descriptors
    of the installed RDKit in RDKit's order; ``"rdkit2d_normalized"``, descriptastorus' 200, prefixed
    with :data:`NORMALIZED_PREFIX`."""
    if kind not in DESCRIPTOR_SETS:
        raise ValueError(f"descriptor set must be one of {DESCRIPTOR_SETS}, got {kind!r}")
    if kind == "rdkit2d_normalized":
        return [NORMALIZED_PREFIX + name for name in _normalized_generator()[1]]
    return list(_functions())


def _normalized(mol, names: Sequence[str]) -> torch.Tensor:
    """The ``rdkit2d_normalized`` descriptors ``names`` (prefixed) of ``mol``, ``(1, D)``."""
    from rdkit import Chem, rdBase  # optional dependency, as above

    gen, column = _normalized_generator()
    missing = [n for n in names if n[len(NORMALIZED_PREFIX):] not in column]
    if missing:
        raise ValueError(f"descriptastorus has no normalised descriptor(s) {missing[:10]}: the model was trained "
                         "with another descriptastorus version; install that one or retrain")
    with rdBase.BlockLogs(), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            values = gen.processMol(mol, Chem.MolToSmiles(mol))
        except Exception:  # noqa: BLE001 (descriptastorus raises many kinds: every value is then unknown)
            values = None
    if not values or not values[0]:  # the first entry says whether the molecule was processed
        return torch.zeros(1, len(names))
    row = np.asarray([values[1 + column[n[len(NORMALIZED_PREFIX):]]] for n in names], dtype=np.float64)
    return torch.from_numpy(np.where(np.isfinite(row), row, 0.0)).float().view(1, -1)


def _compress(v: float) -> float:
    return math.copysign(math.log1p(abs(v)), v)


def mol_descriptors(mol, names: Optional[Sequence[str]] = None) -> torch.Tensor:
    """Descriptors ``names`` (default: all of :func:`descriptor_names`) of an RDKit molecule; names
    with the prefix :data:`NORMALIZED_PREFIX` are the ``rdkit2d_normalized`` set (values in [0, 1]).

    Returns a float32 tensor ``(1, D)`` of ``sign(v) log1p(|v|)`` values; a descriptor that
    fails or is NaN for this molecule is 0, an infinite one ``±``:data:`SATURATED` (so is ``Ipc``
    of molecules with more than :data:`SLOW_MAX_ATOMS` atoms, whose cost explodes with size;
    their ``AvgIpc`` is 0). Raises ``ValueError`` naming the
    descriptors the installed RDKit does not have.
    """
    from rdkit import rdBase  # optional dependency, as above

    normalized = [n.startswith(NORMALIZED_PREFIX) for n in names or ()]
    if any(normalized):
        if not all(normalized):
            raise ValueError("descriptor names mix the rdkit2d and rdkit2d_normalized sets; use one set")
        return _normalized(mol, names)
    fns = _functions()
    names = list(fns) if names is None else list(names)
    missing = [n for n in names if n not in fns]
    if missing:
        import rdkit  # optional dependency, as above

        raise ValueError(f"RDKit {rdkit.__version__} has no descriptor(s) {missing[:10]}"
                         f"{' ...' if len(missing) > 10 else ''}: the model was trained with another "
                         "RDKit version; install that one or retrain")
    out = []
    big = mol.GetNumAtoms() > SLOW_MAX_ATOMS
    # RDKit logs on exotic atoms; numpy warns on overflow inside some descriptors (huge molecules);
    # one BLAS thread: Ipc/AvgIpc (eigenvalues) differ in the 4th digit between thread counts, and the
    # processed cache would depend on OMP_NUM_THREADS of the process that built it
    with rdBase.BlockLogs(), np.errstate(all="ignore"), warnings.catch_warnings(), single_thread_blas(10 ** 6):
        warnings.simplefilter("ignore", RuntimeWarning)
        for n in names:
            if big and n in _SLOW:
                out.append(SATURATED if n == "Ipc" else 0.0)  # AvgIpc: unknown, as a failed descriptor
                continue
            try:
                v = float(fns[n](mol))
            except Exception:  # noqa: BLE001 (RDKit raises many kinds; the value is then unknown)
                v = math.nan
            out.append(_compress(v) if math.isfinite(v) else math.copysign(SATURATED, v) if math.isinf(v) else 0.0)
    return torch.tensor(out, dtype=torch.float32).view(1, -1)


def __getattr__(name: str):
    if name != "AddMolDescriptors":
        raise AttributeError(f"module 'graphattn.data.descriptors' has no attribute {name!r}")
    import importlib

    warnings.warn("graphattn.data.descriptors.AddMolDescriptors moved to graphattn.transforms.AddMolDescriptors",
                  DeprecationWarning, stacklevel=2)
    # by name, at first use: graphattn.transforms sits above graphattn.data
    value = globals()[name] = importlib.import_module("graphattn.transforms").AddMolDescriptors  # warned once
    return value
