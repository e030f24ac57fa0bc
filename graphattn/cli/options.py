"""Which ``graphattn train`` options apply to which task, so that an option that would be
silently ignored is refused instead (one table for the molecule and the social pipelines).

``graphattn.cli.main`` records the options the user actually gave (``args.given_options``:
every destination whose value differs from the parser's default); each pipeline calls
:func:`check_applicable` once it knows what it trains. Without that record (``train``
called directly with a namespace) nothing is checked.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, FrozenSet, Iterable

__all__ = ["GROUPS", "APPLIES", "OURS_ONLY", "check_applicable", "given_options", "out_path", "check_out_folder",
           "check_output_not_input", "DEVICE_HELP"]

#: help of ``--device`` (train, pretrain, examples/social_baselines.py); :func:`graphattn.train.resolve_device`
DEVICE_HELP = "auto (the GPU when CUDA is available, else the CPU; default), cpu, cuda or cuda:N"

#: option destinations by the task they belong to (and the name used in the error message)
GROUPS: Dict[str, FrozenSet[str]] = {
    "molecule": frozenset({"csv", "smiles_col", "tasks", "split", "pos_weight", "descriptors", "ensemble", "init"}),
    "--edges input": frozenset({"edges", "target", "features", "target_col", "id_col"}),
    "graph-set": frozenset({"tu_text", "folds"}),
    "node-classification": frozenset({
        "mini_batch", "num_neighbors", "attn_dropout", "input_dropout", "propagation", "propagation_alpha",
        "propagation_learned", "propagation_dropout", "gcn_weight", "gcn_layers", "self_loops", "label_input",
        "consistency", "consistency_weight", "consistency_temperature", "max_features"}),
    "graph-level": frozenset({"readout", "local_mpnn", "batch_size", "limit"}),
}
#: the groups each task reads
APPLIES = {"molecule": ("molecule", "graph-level"), "node": ("--edges input", "node-classification"),
           "graph": ("graph-set", "graph-level")}
#: options that shape only our model, per task (a --baseline model does not read them)
OURS_ONLY = {
    "molecule": frozenset({"global_tokens", "pe_dim", "local_mpnn", "readout", "init"}),
    "node": frozenset({"global_tokens", "pe_dim", "attn_dropout", "input_dropout", "propagation",
                       "propagation_alpha", "propagation_learned", "propagation_dropout", "gcn_weight",
                       "gcn_layers", "self_loops"}),
    "graph": frozenset({"global_tokens", "pe_dim", "local_mpnn"}),
}
#: PyG baselines without attention heads (--heads would be ignored)
_NO_HEADS = frozenset({"gcn", "gin", "gine"})
_TASK_NAMES = {"molecule": "molecules", "node": "node classification", "graph": "graph sets"}


def given_options(args, defaults) -> FrozenSet[str]:
    """Destinations of ``args`` whose value differs from ``defaults`` (a namespace or dict)."""
    base = vars(defaults) if not isinstance(defaults, dict) else defaults
    return frozenset(k for k, v in vars(args).items() if k in base and base[k] != v)


def _flags(names: Iterable[str]) -> str:
    return ", ".join(f"--{n.replace('_', '-')}" for n in sorted(names))


def check_applicable(args, task: str, baseline: str = "none") -> None:
    """ValueError naming every given option that ``task`` (``"molecule"``, ``"node"`` or
    ``"graph"``) would not read, and with ``baseline`` != ``"none"`` every option of our model."""
    given = getattr(args, "given_options", None)
    if given is None:
        return
    for group, names in GROUPS.items():
        if group in APPLIES[task]:
            continue
        bad = given & names
        if bad:
            raise ValueError(f"{_flags(bad)}: {group} option(s), not used for {_TASK_NAMES[task]}")
    if baseline and baseline != "none":
        bad = given & (OURS_ONLY[task] | (frozenset({"heads"}) if baseline in _NO_HEADS else frozenset()))
        if bad:
            raise ValueError(f"{_flags(bad)}: option(s) of our model, not used by --baseline {baseline}")


def check_output_not_input(out: Path, inputs: Dict[str, object]) -> None:
    """ValueError when writing ``out`` would replace one of the command's ``inputs`` (``{what:
    path}``: the checkpoint, the ``--csv`` file, ...) or any existing checkpoint (``*.pt``)."""
    if not out.is_file():  # a new file, or /dev/stdout, a terminal, a pipe: nothing to replace
        return
    for what, path in inputs.items():
        try:
            same = path is not None and os.path.samefile(out, path)
        except OSError:
            same = False
        if same:
            raise ValueError(f"--out {out} is {what}: writing there would replace it; choose another file")
    if out.suffix == ".pt":
        raise ValueError(f"--out {out} is an existing checkpoint file (.pt); write predictions to a .csv")


def out_path(out, default_name: str) -> Path:
    """``out``, or ``out/default_name`` when ``out`` is an existing folder or ends with a slash
    (a folder not made yet): what ``predict`` / ``explain`` write to."""
    path = Path(out)
    if path.is_dir() or str(out).endswith(("/", "\\")):
        return path / default_name
    return path


def check_out_folder(out, name: str = "--out") -> None:
    """ValueError when ``out`` (a run's output folder; ``name``: how the caller spells it, e.g.
    ``fit``'s ``out_dir``) names an existing file, lies under one, or is not writable: found
    before any data is read or epoch trained, not at the first checkpoint."""
    if out is None:
        return
    if Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"{name} {out} is a file, not a folder")
    parent = next((p for p in Path(out).parents if p.exists()), None)  # the nearest existing ancestor
    if parent is not None and not parent.is_dir():
        raise ValueError(f"{name} {out}: {parent} is a file, so no folder can be made under it")
    here = Path(out) if Path(out).is_dir() else parent
    if here is not None and not os.access(here, os.W_OK | os.X_OK):  # read-only mount or permissions
        raise ValueError(f"{name} {out}: {here} is not writable")
