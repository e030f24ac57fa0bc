"""Molecule tasks behind the CLI: train on a named MoleculeNet set or any SMILES CSV, then
evaluate, predict and explain with the checkpoint.

``graphattn train tox21`` (or any name of :data:`graphattn.data.moleculenet.MOLECULENET`: ``toxcast``,
``clintox``, ``sider``, ``bbbp``, ``bace``, ``hiv``; or ``--csv FILE``)
featurizes the molecules (:mod:`graphattn.data.molecules`, cached), adds Laplacian PE,
splits them (scaffold by default), trains a :class:`~graphattn.GraphClassifier` with one
global token — or, with ``--baseline gine|gat``, a PyG model of the same width and depth
(:class:`~graphattn.nn.models.baselines.MPNNBaseline`) — through the shared loop
:func:`graphattn.train.fit`, and writes ``OUT/metrics.json`` and ``OUT/best.pt``. The
checkpoint's ``meta`` holds the model class and constructor kwargs, the featurizer
version, the task names, the PE size and the data/split settings, so ``evaluate``,
``predict`` and ``explain`` rebuild everything from it alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from graphattn.cli.molecules_summary import print_result, regression_hint
from graphattn.cli.options import (GROUPS, check_applicable, check_objective, check_rerun, recipe_options,
                                   train_options, usage_error)
from graphattn.data.download import DataFileError, sha256sum
from graphattn.data.moleculenet import MOLECULENET, moleculenet_names
from graphattn.nn.models.regression import target_statistics
from graphattn.tasks.molecules.data import (descriptor_set, file_sha256, load_dataset, split_indices, unlabelled_tasks,
                                            warn_one_class_tasks)
from graphattn.tasks.molecules.defaults import ARCH_KEYS, BASELINES, DEFAULTS
from graphattn.tasks.molecules.finetune import load_pretrained
from graphattn.tasks.molecules.pipeline import model_spec, run_ensemble, training_targets
from graphattn.tasks.molecules.recipe import MoleculeRecipe
from graphattn.train.checkpoint import CheckpointError, load_checkpoint, write_metrics
from graphattn.train.runtime import resolve_device

__all__ = ["train", "recipe_of", "split_of", "check_options", "load_data"]


def recipe_of(args) -> MoleculeRecipe:
    """The run's recipe: the defaults with the options the command line gives (checked here with the
    options' names; the recipe checks every value again)."""
    if getattr(args, "hops", None) is not None and args.hops < 1:
        raise ValueError(f"--hops must be >= 1 (1 = attention over the bonds only), got {args.hops}")
    task_type = _task_type(args)
    check_objective(args, task_type, "regression" if task_type == "regression" else "binary")
    return MoleculeRecipe.from_dict({**recipe_options(args, DEFAULTS), **train_options(args), "task_type": task_type})


def _task_type(args) -> str:
    """``--task-type``, else the named set's, else classification; a named set's own type wins over a
    contradicting flag with an error."""
    named = MOLECULENET.get((args.dataset or "").lower()) if args.csv is None else None
    given = getattr(args, "task_type", None)
    if named is not None and given is not None and given != named.task_type:
        raise ValueError(f"{args.dataset} is a {named.task_type} set; drop --task-type {given}")
    return given or (named.task_type if named is not None else "classification")


def split_of(args) -> tuple:
    """``(split, split_col)`` of the run: ``--split-col`` (or a named set's own split column, unless
    ``--split`` is given) is the ``"column"`` split."""
    given = getattr(args, "given_options", frozenset())
    col = getattr(args, "split_col", None)
    if col is not None and "split" in given:
        raise ValueError(f"--split-col {col} and --split {args.split}: give one of them")
    named = MOLECULENET.get((args.dataset or "").lower()) if args.csv is None else None
    if col is not None and args.csv is None:
        raise ValueError(f"--split-col {col} names a column of --csv; "
                         + (f"{args.dataset} uses its own split column {named.split_col!r}"
                            if named is not None and named.split_col else f"{args.dataset} has no split column"))
    if col is None and named is not None and named.split_col and "split" not in given:
        return "column", named.split_col
    return ("column", col) if col is not None else (args.split, None)


# ----------------------------------------------------------------------------- train
#: ``graphattn train`` options of the social tasks that have no meaning for molecules (from the one table of
#: :data:`graphattn.cli.options.GROUPS`), refused by value even when ``train`` is called with a namespace
_SOCIAL_ONLY = sorted(GROUPS["node-classification"] | {"folds"})


def check_options(args, hp: MoleculeRecipe, baseline: str) -> None:
    """ValueError for a molecule ``train`` option that is wrong, contradicts another, or is not for molecules."""
    if baseline not in BASELINES:
        raise ValueError(f"--baseline must be one of {', '.join(BASELINES)} for molecules, got {baseline!r}")
    if args.csv is not None and args.dataset is not None:
        raise ValueError(f"give either a dataset name ({args.dataset!r}) or --csv ({args.csv!r}), not both")
    if args.csv is not None and Path(args.csv).exists() and not (Path(args.csv).is_file() or Path(args.csv).is_dir()):
        raise ValueError(f"--csv {args.csv} is a pipe, not a file: a run reads its CSV again later (evaluate, "
                         "predict and --resume rebuild the split from it), so save it to a file first "
                         "(gzipped CSVs are read as they are)")
    if args.csv is None and "smiles_col" in getattr(args, "given_options", frozenset()):
        raise ValueError(f"--smiles-col {args.smiles_col} names a column of --csv; {args.dataset} has its own")
    if args.tasks is not None and not args.tasks.strip():
        raise ValueError("--tasks is empty; leave it out to train on every task column")
    if args.csv is None and args.dataset.lower() not in MOLECULENET:
        raise ValueError(f"unknown molecule dataset {args.dataset!r}; choose one of {moleculenet_names()}")
    social = [f"--{k.replace('_', '-')}" for k in _SOCIAL_ONLY if getattr(args, k, None) not in (None, False)]
    if social:  # parsed for the social tasks: refuse rather than silently ignore them
        raise ValueError(f"{', '.join(social)} {'is a' if len(social) == 1 else 'are'} social-network "
                         "option(s), not used for molecules")
    check_applicable(args, "molecule", baseline)
    if hp.task_type == "regression" and args.pos_weight:
        raise ValueError("--pos-weight weighs the positive labels of binary tasks; it has no meaning for "
                         "--task-type regression")
    if hp.readout == "token" and hp.global_tokens < 1 and baseline == "none":
        raise ValueError("--readout token needs --global-tokens >= 1")
    if hp.hops > 1 and getattr(args, "init", None) is not None:
        raise ValueError(f"--hops {hp.hops} with --init: pretrained backbones attend over the bonds only "
                         "(graphattn pretrain has no hop edges); drop --hops")


def _architecture(args, hp: MoleculeRecipe, out: Path):
    """``(hp, ensemble size, init)``: a resumed run keeps its ensemble size and backbone, a fine-tuned
    one (``--init``) the pretrained backbone's settings."""
    init = getattr(args, "init", None)
    ensemble = _resumed_ensemble_size(out, args.ensemble) if args.resume else args.ensemble
    ensemble = 1 if ensemble is None else ensemble
    if ensemble < 1:
        raise ValueError(f"--ensemble must be >= 1, got {ensemble}")
    if init is None and args.resume:  # a fine-tuned run (or ensemble) resumed without --init
        init = _resumed_init(out, ensemble)
    if init is not None:
        hp = _pretrained_arch(hp, init, getattr(args, "given_options", frozenset()),
                              resumed=getattr(args, "init", None) is None)
    elif args.resume:
        last = next((p for p in (out / "last.pt", out / "member0" / "last.pt") if p.is_file()), None)
        if last is not None:
            hp = _resumed_arch(hp, last, getattr(args, "given_options", frozenset()))
    return hp, ensemble, init


def load_data(args, name: str, descriptors, hp: MoleculeRecipe, ours: bool):
    """``(dataset, split indices)`` of the run (with the PE and hop edges of ``hp`` for our model,
    ``ours``); ValueError when there is nothing to learn."""
    regression = hp.task_type == "regression"
    split, split_col = split_of(args)
    ds = load_dataset(None if args.csv else name, args.csv, args.smiles_col, args.tasks or None,
                      hp.pe_dim if ours else 0, args.limit, log=not args.no_progress, descriptors=descriptors,
                      pe_kind=hp.pe_kind, hops=hp.hops if ours else 1, binary=not regression,
                      split_col=split_col if args.csv else None)
    if not ds.task_names:
        what = "numeric target" if regression else "0/1 label"
        raise ValueError(f"{name}: no task columns of {what}s found; pass --tasks"
                         + ("" if regression else regression_hint(args.csv, args.smiles_col)))
    if not regression:
        warn_one_class_tasks(ds, name)
    empty = unlabelled_tasks(ds) if args.tasks else []  # named by the user: nothing to learn
    if empty:
        raise ValueError(f"{name}: task column(s) {empty} hold no label for any of the {len(ds)} "
                         "molecules read (every cell empty or missing"
                         + (f"; only the first {args.limit} were read, --limit" if args.limit else "")
                         + "); leave them out of --tasks")
    idx = split_indices(ds, split, args.seed)
    if regression:  # a task without training values, or a constant one, is refused by name before training
        target_statistics(training_targets(ds, idx[0]), ds.task_names)
    return ds, idx


def _summary(args, name: str, data: Dict[str, Any], ds, spec, baseline: str, res: Dict[str, Any]) -> Dict[str, Any]:
    """The contents of ``OUT/metrics.json``."""
    skipped = [{"row": r, "smiles": s, "reason": why} for r, s, why in ds.skipped]
    summary = {**data, "dataset": name, "model": spec.name, "baseline": baseline,
               "pos_weight": bool(args.pos_weight), "task_type": res["meta"]["task_type"],
               "task_names": list(ds.task_names), "num_molecules": len(ds),
               "skipped": {"count": len(skipped), "rows": [s["row"] for s in skipped], "molecules": skipped},
               **res}
    for part in ("val", "test"):  # a split too small for validation/test molecules: null, not absent
        summary.setdefault(part, None)
    return summary


def train(args) -> int:
    """``graphattn train`` for molecules: validate the options, load and split, build, train (one line
    per epoch), write ``OUT/metrics.json`` and print a summary."""
    try:
        hp, (split, split_col) = recipe_of(args), split_of(args)
    except ValueError as exc:
        return usage_error("train", str(exc))
    baseline = getattr(args, "baseline", "none") or "none"
    name = args.dataset.lower() if args.csv is None and args.dataset else Path(args.csv or "").name
    out = Path(args.out) if args.out else Path("runs") / f"{Path(name).stem}-{split}-seed{args.seed}"
    try:
        check_options(args, hp, baseline)
        check_rerun(out, args)
        device = resolve_device(getattr(args, "device", None))
        hp, ensemble, init = _architecture(args, hp, out)
    except (ValueError, FileNotFoundError, CheckpointError) as exc:
        return usage_error("train", str(exc))
    descriptors = descriptor_set(hp.descriptors)
    try:
        ds, split_idx = load_data(args, name, descriptors, hp, ours=baseline == "none")
        spec = model_spec(baseline, len(ds.task_names), hp, graph_feature_dim=len(descriptors or ()))
        spec.build()  # option clashes (e.g. --hidden not divisible by --heads) are input errors
    except (DataFileError, ValueError) as exc:
        return usage_error("train", str(exc))
    data = {"dataset": None if args.csv else name,
            "csv": str(Path(args.csv).expanduser().resolve()) if args.csv else None,
            "smiles_col": args.smiles_col, "tasks": list(ds.task_names) if args.tasks else None,
            "split": split, "split_col": split_col, "seed": args.seed, "limit": args.limit,
            "sha256": file_sha256(ds)}
    print(f"{name}: {len(ds)} molecules ({len(ds.skipped)} of {ds.num_rows} skipped: invalid SMILES), "
          f"{len(ds.task_names)} {hp.task_type} tasks, "
          f"{'the split column ' + repr(split_col) if split == 'column' else split + ' split'} "
          f"{'/'.join(str(len(i)) for i in split_idx)} | model {spec.name}"
          f"{'(' + baseline + ')' if baseline != 'none' else ''} hidden {hp.hidden} layers {hp.layers}"
          f"{f', ensemble of {ensemble}' if ensemble > 1 else ''}")
    if init is not None:
        print(f"backbone from {init}: heads {hp.heads}, global tokens {hp.global_tokens}, PE {hp.pe_dim}, "
              f"local MPNN {hp.local_mpnn or 'none'} (the pretrained settings; the head starts fresh)")
    res = run_ensemble(ds, split_idx, spec, hp, size=ensemble, seed=args.seed, pos_weight=args.pos_weight,
                       out_dir=out, resume=args.resume, progress=not args.no_progress,
                       # --pos-weight changes the loss: recorded, and a resume may not switch it
                       meta={"data": data, "pos_weight": bool(args.pos_weight)},
                       init=init, device=device)
    res.pop("model")
    summary = _summary(args, name, data, ds, spec, baseline, res)
    write_metrics(out / "metrics.json", summary, environment=True)  # strict JSON: a one-class task's NaN AUC -> null
    print_result(args, name, res, ensemble, summary["skipped"]["molecules"], out)
    return 0


def _fixed_arch(hp: MoleculeRecipe, pre: Mapping[str, Any], given, what: str, short: str) -> MoleculeRecipe:
    """``hp`` with the backbone settings of the checkpoint record ``pre``; an option the user gave
    (``given``) that contradicts them is an error naming ``what`` fixed them, rather than silently overridden."""
    clash = [f"--{k.replace('_', '-')} {getattr(hp, k)} ({short}: {pre[k]})" for k in ARCH_KEYS
             if k in given and k in pre and getattr(hp, k) != pre[k]]
    if clash:
        raise ValueError(f"{what} fixes the backbone's shape; drop {', '.join(clash)}")
    return hp.replace(**{k: pre[k] for k in ARCH_KEYS if k in pre})


def _pretrained_arch(hp: MoleculeRecipe, init, given, resumed: bool = False) -> MoleculeRecipe:
    """``hp`` with the backbone settings of the pretrain checkpoint ``init`` (``resumed``: named
    by the resumed run's record, not by ``--init``)."""
    if not Path(init).exists():
        raise ValueError(f"--init {init}: no such file")
    what = f"the resumed run (fine-tuned from {init})" if resumed else f"--init {init}"
    return _fixed_arch(hp, load_pretrained(init)[1].get("hparams", {}), given, what, "pretrained")


def _resumed_ensemble_size(out: Path, given: Optional[int]) -> Optional[int]:
    """``--resume``: the ensemble size of the run in ``out`` when ``--ensemble`` is left out (its
    ``member*/`` folders), and a ``ValueError`` for a flag that contradicts the folder's layout (a
    single run cannot be resumed as an ensemble, nor an ensemble as one model; growing an
    ensemble is fine)."""
    members = sorted(int(p.name[6:]) for p in out.glob("member*") if p.name[6:].isdigit() and p.is_dir())
    single = (out / "last.pt").is_file()
    if members and single:  # two runs wrote here (an ensemble, then one model, or the reverse)
        if given is None:
            raise ValueError(f"--resume: {out} holds a single model (last.pt) and an ensemble's member*/ folders, "
                             "written by two runs; say which to continue: --ensemble 1 for the single model, "
                             "--ensemble N for the ensemble (or move the other away)")
        if given == 1:
            return 1
    if members:
        size, recorded = max(members) + 1, False  # members not started yet have no folder: checkpoints record the size
        for k in members:
            last = out / f"member{k}" / "last.pt"
            if last.is_file():
                n = int((load_checkpoint(last).get("meta") or {}).get("ensemble_size") or 0)
                size, recorded = max(size, n), recorded or n > 0
        if given is None and not recorded:  # written before sizes were recorded: not guessed
            raise ValueError(f"--resume: {out} holds an ensemble (member*/ folders) whose size its checkpoints do not "
                             "record; pass --ensemble N with the size it was started with")
        if given is not None and given < size:
            raise ValueError(f"--resume: {out} holds an ensemble of {size}; give --ensemble {size} (or more, to grow "
                             f"it), not {given}")
        return given if given is not None else size
    if single and given is not None and given > 1:
        raise ValueError(f"--resume: {out} holds a single model, not an ensemble; drop --ensemble {given} "
                         "or choose another output folder")
    return given


def _resumed_init(out: Path, size: int) -> Optional[str]:
    """``--resume`` without ``--init`` of a fine-tuned run: the pretrain checkpoint its record
    names, so that members not started yet begin from it too (not from random weights). None
    for a run trained from scratch; a ``ValueError`` when that file is gone or changed and a
    member still has to start."""
    lasts = [out / "last.pt"] if size == 1 else [out / f"member{k}" / "last.pt" for k in range(size)]
    record = next(((load_checkpoint(p).get("meta") or {}).get("init") for p in lasts if p.is_file()), None)
    if not record or not record.get("checkpoint"):
        return None
    path = Path(record["checkpoint"])
    if path.is_file() and sha256sum(path) == record.get("sha256"):
        return str(path)
    missing = [str(p.parent.name if size > 1 else p) for p in lasts if not p.is_file()]
    if missing:
        raise ValueError(f"--resume: the run was fine-tuned from {path}, which is "
                         + ("gone" if not path.is_file() else "changed (sha256 differs)")
                         + f", and {', '.join(missing)} must still start from it: pass --init with that checkpoint")
    return None


def _resumed_arch(hp: MoleculeRecipe, last, given) -> MoleculeRecipe:
    """``hp`` with the backbone settings of the run in ``last`` when that run was fine-tuned
    from a pretrained backbone (``--resume`` then needs neither ``--init`` nor its flags)."""
    meta = load_checkpoint(last).get("meta") or {}
    if not meta.get("init"):
        return hp
    return _fixed_arch(hp, meta.get("hparams", {}), given, f"the resumed run {last} (fine-tuned from "
                       f"{meta['init'].get('checkpoint')})", "resumed run")


