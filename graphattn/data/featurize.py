"""SMILES -> PyG graphs: categorical atom and bond features (RDKit imported lazily).

Follows the OGB / PyG ``from_smiles`` atom feature set, re-implemented rather than reused.
PyG's ``torch_geometric.utils.from_smiles`` was checked (PyG 2.8): it has atom ring
membership, but (a) no ring flag on bonds, (b) it turns an invalid SMILES silently into an
empty graph, (c) it looks values up with ``list.index`` in fixed lists, so values outside
them (e.g. newer RDKit enums such as ``SP2D`` hybridization or atropisomer bond stereo)
raise ``ValueError``, and (d) it turns off RDKit logging for the whole process. Here every
column has an "other" bucket (the last index), bonds carry ring membership, invalid SMILES
raise :class:`InvalidSmilesError` with RDKit's reason, and RDKit's console output is
blocked only while we call it (``rdBase.BlockLogs``).

Node ``i`` of a graph is RDKit atom ``i`` of ``Chem.MolFromSmiles(smiles)`` (implicit
hydrogens are not nodes), so atom-level outputs can be drawn on the molecule.
"""
from __future__ import annotations

import contextlib
import re
import threading
import unicodedata
from typing import List

import torch
from torch_geometric.data import Data

__all__ = [
    "FEATURIZER_VERSION", "ATOM_FEATURE_NAMES", "ATOM_FEATURE_DIMS", "BOND_FEATURE_NAMES",
    "BOND_FEATURE_DIMS", "InvalidSmilesError", "InvalidSmilesWarning", "parse_smiles",
    "mol_to_data", "smiles_to_data", "canonical_smiles",
]

#: Bump whenever the features below (or their order / vocabularies) change: processed
#: caches and checkpoints are keyed by it. Version 4: stereo columns are CIP labels from RDKit's
#: CIP labeller (``rdCIPLabeler``, on a copy of the molecule): atoms R / S / r / s, double bonds
#: E / Z / e / z, biaryl axes (atropisomers) P / M. Version 1 used RDKit's chiral tag (CW / CCW),
#: which is relative to the order the SMILES lists the neighbours in: ``C[C@H](N)C(=O)O`` and
#: ``N[C@@H](C)C(=O)O`` (both L-alanine) got different features, and one of them D-alanine's.
#: SMILES are parsed, and unperceived molecules perceived, with RDKit's legacy stereo perception
#: (its default) whatever the process-wide switch says, so the switch changes no feature.
FEATURIZER_VERSION = "4"

#: chirality column: no stereocentre, R, S, r, s (pseudo-asymmetric); the "other" bucket is a
#: centre with a chiral tag but no CIP label: non-tetrahedral tags (square planar, octahedral, ...),
#: members of a CXSMILES AND / OR stereo group (``|&1:1|``: a racemate or an unknown one of the
#: two enantiomers, so not the absolute label the tags spell; the relative configuration of a
#: group's centres is not encoded: erythro and threo racemates look alike, though their duplicate
#: keys differ), or a molecule too symmetric for the labeller's iteration limit. OGB and PyG's
#: ``from_smiles`` use the chiral tag (spelling-dependent).
_CHIRALITY = {k: i for i, k in enumerate(["", "R", "S", "r", "s"])}
#: the labeller's work limit per molecule (RDKit: 1,250,000 recursive comparisons ~ 1 s)
_CIP_MAX_ITERATIONS = 1_250_000
_HYBRIDIZATION = {k: i for i, k in enumerate(
    ["S", "SP", "SP2", "SP3", "SP3D", "SP3D2", "UNSPECIFIED"])}
_BOND_TYPE = {k: i for i, k in enumerate(["SINGLE", "DOUBLE", "TRIPLE", "AROMATIC"])}
#: bond stereo column: RDKit's flag where no CIP label applies (none, cis/trans: a stereo bond
#: the labeller could not label, any = unknown), else the CIP label (Z, E, pseudo-asymmetric z, e,
#: atropisomer axes M, P); the first six indices are those of featurizer version 1
_BOND_STEREO = {k: i for i, k in enumerate(
    ["STEREONONE", "Z", "E", "STEREOCIS", "STEREOTRANS", "STEREOANY", "z", "e", "M", "P"])}

#: Columns of ``data.x`` (all int64 categories; the last index of each is "other").
ATOM_FEATURE_NAMES = ["atomic_num", "degree", "formal_charge", "chirality", "hybridization",
                      "is_aromatic", "num_hs", "is_in_ring", "num_radical_electrons"]
#: Number of categories per atom column: atomic number 0..118 (0 = dummy ``*``), total
#: degree 0..10, formal charge -5..+5, chirality, hybridization, aromatic, total H 0..8,
#: in ring, radical electrons 0..4 -- each plus one "other" bucket (not the booleans).
ATOM_FEATURE_DIMS = [120, 12, 12, len(_CHIRALITY) + 1, len(_HYBRIDIZATION) + 1, 2, 10, 2, 6]
#: Columns of ``data.edge_attr``.
BOND_FEATURE_NAMES = ["bond_type", "is_conjugated", "is_in_ring", "stereo"]
BOND_FEATURE_DIMS = [len(_BOND_TYPE) + 1, 2, 2, len(_BOND_STEREO) + 1]


class InvalidSmilesError(ValueError):
    """RDKit cannot turn a SMILES string into a molecule; ``.reason`` says why."""

    def __init__(self, smiles, reason: str):
        super().__init__(f"invalid SMILES {smiles!r}: {reason}")
        self.smiles, self.reason = smiles, reason


class InvalidSmilesWarning(UserWarning):
    """A dataset skipped rows whose SMILES RDKit cannot parse (see ``dataset.skipped``)."""


_INNER_SPACE = re.compile(r"\s")
#: a SMILES followed by one CXSMILES extension ``|...|`` (no line breaks), e.g. ``C* |$;_R1$|``
_CXSMILES = re.compile(r"\S+[ \t]+\|[^|\r\n]*\|")


def _bucket(value: int, lo: int, hi: int) -> int:
    return value - lo if lo <= value <= hi else hi - lo + 1


def _chirality(atom) -> int:
    """The atom's CIP label (set by :func:`_cip_labelled`): the same for every spelling of a
    molecule (checked on Tox21's 1,321 chiral molecules, 5 random SMILES each), unlike the
    chiral tag."""
    if str(atom.GetChiralTag()) == "CHI_UNSPECIFIED":
        return _CHIRALITY[""]
    code = atom.GetProp("_CIPCode") if atom.HasProp("_CIPCode") else ""
    return _CHIRALITY.get(code, len(_CHIRALITY)) if code else len(_CHIRALITY)


def _looks_sanitized(mol) -> bool:
    """Whether ``mol`` went through RDKit's sanitization as far as we can tell: ring perception ran
    (``sanitize=False`` followed by ``UpdatePropertyCache`` leaves it out) and some atom has a
    hybridization (a molecule read with ``sanitize=False`` and ring-perceived some other way has
    none: no aromaticity, Kekulé bonds). Sanitized molecules always pass (16.6k Tox21 / ToxCast /
    BACE molecules checked); a false "no" only costs a re-sanitization of a copy."""
    from rdkit import Chem, rdBase  # optional dependency: `import graphattn` works without RDKit

    with rdBase.BlockLogs():
        try:
            mol.GetRingInfo().NumRings()
        except RuntimeError:  # "RingInfo not initialized"
            return False
    unspecified = Chem.HybridizationType.UNSPECIFIED
    return mol.GetNumAtoms() == 0 or any(a.GetHybridization() != unspecified for a in mol.GetAtoms())


#: serialises this module's use of RDKit's process-wide stereo switch (its threads among themselves)
_STEREO_SWITCH = threading.RLock()


@contextlib.contextmanager
def _legacy_stereo_perception():
    """RDKit's legacy stereo perception (its default) for the duration: the features must not
    depend on the process-wide switch (``Chem.SetUseLegacyStereoPerception`` /
    ``RDK_USE_LEGACY_STEREO_PERCEPTION``), which changes what parsing flags as stereo (e.g. a
    spurious Z on ``[H]/[NH+]=C(\\N)c1ccccc1``). RDKit has no per-call option, so the switch is
    set and restored: our own calls hold a lock, but another thread that parses with RDKit
    meanwhile while it asked for the new perception gets the legacy one (a no-op in RDKit's default
    legacy mode)."""
    from rdkit import Chem  # optional dependency: `import graphattn` works without RDKit

    with _STEREO_SWITCH:
        legacy = Chem.GetUseLegacyStereoPerception()
        if not legacy:
            Chem.SetUseLegacyStereoPerception(True)
        try:
            yield
        finally:
            if not legacy:
                Chem.SetUseLegacyStereoPerception(False)


def _cip_labelled(mol):
    """A copy of ``mol`` with CIP labels from RDKit's CIP labeller on its stereo atoms and bonds
    (``_CIPCode``: R/S/r/s, E/Z/e/z, M/P). The caller's molecule is left as it was. On the copy:
    a molecule that needs it is sanitized (``ValueError`` if it cannot be: the features of an
    unsanitized molecule mean something else), one without stereo perception (built by hand,
    read from a file) gets it; centres of CXSMILES AND / OR stereo groups are labelled "rel"
    (the "other" bucket). A fragment the labeller gives up on (its iteration limit) keeps no
    labels: its centres fall in the "other" bucket, its double bonds keep RDKit's stereo flag;
    the other fragments are labelled."""
    from rdkit import Chem, rdBase  # optional dependency: `import graphattn` works without RDKit
    from rdkit.Chem import rdCIPLabeler  # optional dependency, as above

    def clear_labels(objs):
        for obj in objs:
            if obj.HasProp("_CIPCode"):
                obj.ClearProp("_CIPCode")

    def label(atoms, bonds, mark: bool) -> bool:
        try:
            rdCIPLabeler.AssignCIPLabels(mol, atomsToLabel=atoms, bondsToLabel=bonds,
                                         maxRecursiveIterations=_CIP_MAX_ITERATIONS)
            return True
        except Exception:  # MaxIterationsExceeded (a RuntimeError)
            objs = [mol.GetAtomWithIdx(i) for i in atoms] + [mol.GetBondWithIdx(i) for i in bonds]
            clear_labels(objs)
            for obj in objs if mark else ():
                obj.SetProp("_CIPCode", "?")  # not labelled: "other" / RDKit's flag, see above
            return False

    def stereo_parts():
        unspecified, none = Chem.ChiralType.CHI_UNSPECIFIED, Chem.BondStereo.STEREONONE
        return ([a.GetIdx() for a in mol.GetAtoms() if a.GetChiralTag() != unspecified],
                [b.GetIdx() for b in mol.GetBonds() if b.GetStereo() != none])

    unsanitized = mol.NeedsUpdatePropertyCache() or not _looks_sanitized(mol)
    prepare = unsanitized or not mol.HasProp("_StereochemDone")
    atoms, bonds = stereo_parts()
    if not (prepare or atoms or bonds or mol.GetStereoGroups()):
        return mol  # no stereo: the features read no label (see _chirality, _bond_stereo)
    mol = Chem.Mol(mol)
    if unsanitized:  # sanitize=False (perhaps with UpdatePropertyCache), or edited since
        try:
            with rdBase.BlockLogs():  # the reason goes into our error, not to stderr
                Chem.SanitizeMol(mol)
        except Exception as exc:  # RDKit raises several exception types
            raise ValueError(f"the molecule cannot be sanitized ({type(exc).__name__}: {exc}); its atom "
                             "and bond features would mean something else than they do elsewhere") from None
    if not mol.HasProp("_StereochemDone"):
        with _legacy_stereo_perception():
            Chem.AssignStereochemistry(mol, cleanIt=True, force=True)
    if prepare:
        atoms, bonds = stereo_parts()
    # perception's own labels, if any (stale after edits): only these atoms' and bonds' are read
    clear_labels([mol.GetAtomWithIdx(i) for i in atoms] + [mol.GetBondWithIdx(i) for i in bonds])
    # (the labeller labels EVERY atom and bond when both lists are empty: never call it so)
    frags = Chem.GetMolFrags(mol, asMols=False, sanitizeFrags=False) if atoms or bonds else ()
    if (atoms or bonds) and not label(atoms, bonds, mark=len(frags) == 1) and len(frags) > 1:
        for frag in frags:  # the fragments the labeller can do still count
            inside = set(frag)
            frag_atoms = [i for i in atoms if i in inside]
            frag_bonds = [i for i in bonds if mol.GetBondWithIdx(i).GetBeginAtomIdx() in inside]
            if frag_atoms or frag_bonds:
                label(frag_atoms, frag_bonds, mark=True)
    for group in mol.GetStereoGroups():
        if str(group.GetGroupType()) in ("STEREO_AND", "STEREO_OR"):
            # a racemate / one of two: not the absolute label. (Atropisomer axes in groups:
            # StereoGroup.GetBonds, in RDKit releases after 2024.03; none before.)
            for obj in (*group.GetAtoms(), *getattr(group, "GetBonds", tuple)()):
                obj.SetProp("_CIPCode", "rel")
    return mol


def _atom_features(atom) -> List[int]:
    return [
        _bucket(atom.GetAtomicNum(), 0, 118),
        _bucket(atom.GetTotalDegree(), 0, 10),
        _bucket(atom.GetFormalCharge(), -5, 5),
        _chirality(atom),
        _HYBRIDIZATION.get(str(atom.GetHybridization()), len(_HYBRIDIZATION)),
        int(atom.GetIsAromatic()),
        _bucket(atom.GetTotalNumHs(), 0, 8),
        int(atom.IsInRing()),
        _bucket(atom.GetNumRadicalElectrons(), 0, 4),
    ]


def _bond_features(bond) -> List[int]:
    return [
        _BOND_TYPE.get(str(bond.GetBondType()), len(_BOND_TYPE)),
        int(bond.GetIsConjugated()),
        int(bond.IsInRing()),
        _bond_stereo(bond),
    ]


def _bond_stereo(bond) -> int:
    """The bond's CIP label (:func:`_cip_labelled`: E, Z, e, z, M, P). Without one: a bond RDKit
    flags E / Z is none when the labeller found it not stereogenic (legacy perception's spurious
    flags, e.g. on ``=[NH2+]``) and keeps the flag when the labeller gave up on it ("?"); cis /
    trans / any (relative or unknown configurations) keep RDKit's flag."""
    flag = str(bond.GetStereo())
    if flag == "STEREONONE":
        return _BOND_STEREO[flag]  # (a label left on it by an edit is stale)
    code = bond.GetProp("_CIPCode") if bond.HasProp("_CIPCode") else ""
    if code in _BOND_STEREO:
        return _BOND_STEREO[code]
    if flag in ("STEREOE", "STEREOZ"):
        return _BOND_STEREO[flag[-1]] if code == "?" else _BOND_STEREO["STEREONONE"]
    return _BOND_STEREO.get(flag, len(_BOND_STEREO))


def parse_smiles(smiles):
    r"""SMILES → sanitized ``rdkit.Chem.Mol``; raises :class:`InvalidSmilesError` with the reason.

    Empty or non-string input, syntax errors, sanitization failures (e.g. the hypervalent
    ``[AlH3]`` entries of Tox21) and molecules without atoms are all invalid. We do not
    fall back to ``sanitize=False``: an unsanitized molecule has no ring, aromaticity or
    hybridization perception, so its features would not mean what they mean elsewhere.

    Leading and trailing whitespace is ignored. Whitespace *inside* the SMILES (``"CC O"``,
    ``"CCO\nCCN"``, ``"c1ccccc1 junk"``) makes it invalid ("whitespace inside the SMILES"):
    RDKit would silently read only the part before it (the rest is taken as a name). The one
    exception is a CXSMILES extension, ``"SMILES |...|"``, which RDKit reads. Characters
    outside printable ASCII (``"CCO\u200b"``, ``"CCO®"``) make it invalid too: RDKit would drop them.
    """
    from rdkit import Chem, rdBase  # optional dependency: `import graphattn` works without RDKit

    if not isinstance(smiles, str) or not smiles.strip():
        raise InvalidSmilesError(smiles, "empty SMILES")
    text = smiles.strip()
    if _INNER_SPACE.search(text) and not _CXSMILES.fullmatch(text):
        raise InvalidSmilesError(smiles, "whitespace inside the SMILES")
    odd = next((c for c in _INNER_SPACE.split(text, 1)[0] if not " " < c < "\x7f"), None)
    if odd is not None:  # e.g. a zero-width space pasted from a web page: RDKit drops it silently
        raise InvalidSmilesError(smiles, f"character U+{ord(odd):04X} ({unicodedata.name(odd, 'unnamed')}) at "
                                         f"position {text.index(odd)}: a SMILES is printable ASCII")
    with rdBase.BlockLogs(), _legacy_stereo_perception():
        mol = Chem.MolFromSmiles(text)
        if mol is None:  # diagnose: syntax error, or which sanitization step failed
            raw = Chem.MolFromSmiles(text, sanitize=False)
            if raw is None:
                raise InvalidSmilesError(smiles, "SMILES syntax error")
            try:
                Chem.SanitizeMol(raw)
                reason = "RDKit could not sanitize the molecule"
            except Exception as exc:  # RDKit raises several exception types
                reason = f"{type(exc).__name__}: {exc}"
            raise InvalidSmilesError(smiles, reason)
    if mol.GetNumAtoms() == 0:
        raise InvalidSmilesError(smiles, "no atoms")
    return mol


#: above this size :func:`canonical_smiles` returns its ``fallback``: RDKit's canonical ranking
#: killed the process (segmentation fault) on a 20,000-atom chain, fine at 15,000
CANONICAL_MAX_ATOMS = 5000


def canonical_smiles(mol, fallback: str) -> str:
    """RDKit's canonical SMILES of ``mol`` plus the CXSMILES parts the features read: enhanced
    stereo groups (``|&1:1|``: a racemate is not its pure enantiomer) and atropisomer axes
    (``|wU:...|``: plain SMILES writes P and M alike). The duplicate key of the molecule sets;
    ``fallback`` (e.g. the SMILES text) for molecules of more than :data:`CANONICAL_MAX_ATOMS`."""
    from rdkit import Chem  # optional dependency: `import graphattn` works without RDKit

    if mol.GetNumAtoms() > CANONICAL_MAX_ATOMS:
        return fallback

    keep = [i for i, g in enumerate(mol.GetStereoGroups()) if str(g.GetGroupType()) != "STEREO_ABSOLUTE"]
    if len(keep) < len(mol.GetStereoGroups()):  # an ABS group says what the plain tags say: not in the key
        mol = Chem.RWMol(mol)
        groups = mol.GetStereoGroups()  # the copy's own groups: the original's belong to another molecule
        mol.SetStereoGroups([groups[i] for i in keep])
    fields = Chem.CXSmilesFields.CX_ENHANCEDSTEREO | Chem.CXSmilesFields.CX_BOND_ATROPISOMER
    return Chem.MolToCXSmiles(mol, Chem.SmilesWriteParams(), fields)


def mol_to_data(mol) -> Data:
    """``rdkit.Chem.Mol`` → ``Data(x (N, 9) int64, edge_index (2, E), edge_attr (E, 4) int64)``.

    Each bond gives two directed edges with the same features; edges are sorted by
    (source, target). Molecules without bonds get ``edge_index`` of shape ``(2, 0)``.
    """
    mol = _cip_labelled(mol)  # a copy with CIP labels; the caller's molecule is left as it was
    x = torch.tensor([_atom_features(a) for a in mol.GetAtoms()],
                     dtype=torch.long).view(-1, len(ATOM_FEATURE_DIMS))  # (N, 9)
    src, dst, attr = [], [], []
    for bond in mol.GetBonds():
        i, j, f = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx(), _bond_features(bond)
        src += [i, j]
        dst += [j, i]
        attr += [f, f]
    edge_index = torch.tensor([src, dst], dtype=torch.long).view(2, -1)  # (2, E)
    edge_attr = torch.tensor(attr, dtype=torch.long).view(-1, len(BOND_FEATURE_DIMS))  # (E, 4)
    if edge_index.numel() > 0:
        perm = (edge_index[0] * x.size(0) + edge_index[1]).argsort()
        edge_index, edge_attr = edge_index[:, perm], edge_attr[perm]
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr)


def smiles_to_data(smiles: str, y=None) -> Data:
    """SMILES → PyG ``Data`` with ``x``, ``edge_index``, ``edge_attr``, ``smiles`` (and ``y``).

    Raises :class:`InvalidSmilesError` (a ``ValueError``) when RDKit cannot parse or
    sanitize the SMILES; datasets catch it, skip the row and report it. ``y`` (T values,
    NaN = missing label) is stored as a float32 tensor of shape ``(1, T)``.
    Feature columns: :data:`ATOM_FEATURE_NAMES` / :data:`BOND_FEATURE_NAMES`, with
    cardinalities :data:`ATOM_FEATURE_DIMS` / :data:`BOND_FEATURE_DIMS`. Stereo columns are
    CIP labels (see :data:`FEATURIZER_VERSION`): the same for every spelling of a molecule.
    Parsing holds RDKit's process-wide stereo switch at its legacy (default) setting for the
    call, so a thread that asked RDKit for the new perception may see the legacy one meanwhile.
    """
    data = mol_to_data(parse_smiles(smiles))
    data.smiles = smiles.strip()
    if y is not None:
        data.y = torch.as_tensor(y, dtype=torch.float32).reshape(1, -1)  # (1, T)
    return data
