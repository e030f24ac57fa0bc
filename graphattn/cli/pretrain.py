"""``graphattn pretrain``: self-supervised pretraining of the molecule backbone on SMILES files
(:mod:`graphattn.tasks.molecules.pretrain`); ``graphattn train tox21 --init OUT/best.pt`` fine-tunes from it."""
from __future__ import annotations

import sys
from pathlib import Path

from graphattn.cli.options import check_rerun, check_train_numbers
from graphattn.data.download import DataFileError
from graphattn.data.moleculenet import MOLECULENET
from graphattn.tasks.molecules.files import spooled
from graphattn.tasks.molecules.pretrain import run_pretraining
from graphattn.tasks.molecules.pretrain_data import molecule_pool
from graphattn.train.checkpoint import CheckpointError, write_metrics
from graphattn.train.runtime import resolve_device
from graphattn.utils.files import check_out_folder

__all__ = ["pretrain"]


def _check(args) -> None:
    """ValueError naming the first out-of-range option (the ``train`` rules, plus the
    pretraining fractions)."""
    check_train_numbers(args)
    resolve_device(args.device)
    for name in ("mask_rate", "val_fraction"):
        if not 0.0 < getattr(args, name) < 1.0:
            raise ValueError(f"--{name.replace('_', '-')} must be in (0, 1), got {getattr(args, name)}")
    check_out_folder(args.out)
    check_rerun(Path(args.out), args)


def pretrain(args) -> int:
    try:
        _check(args)
    except ValueError as exc:
        print(f"graphattn pretrain: {exc}", file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    cols = [c for c in args.smiles_col.split(",") if c.strip()] or ["smiles"]
    try:
        # pipes (<(...), /dev/stdin) are read more than once: spooled into temporary files
        exclude = [src if str(src).lower() in MOLECULENET else spooled(src) for src in args.exclude]
        graphs, report = molecule_pool([spooled(p) for p in args.csv], cols, pe_dim=args.pe_dim, exclude=exclude,
                                       limit=args.limit, log=not args.no_progress)
    except (DataFileError, ValueError) as exc:
        print(f"graphattn pretrain: {exc}", file=sys.stderr)
        return 2
    for f in report["files"]:
        print(f"{Path(f['path']).name}: {f['rows']} rows, {f['used']} used ({f['invalid']} invalid SMILES, "
              f"{f['duplicates']} duplicates, {f['excluded']} excluded)")
    hp = {k: getattr(args, k) for k in ("epochs", "lr", "weight_decay", "batch_size", "hidden", "layers", "heads",
                                         "global_tokens", "pe_dim", "dropout", "local_mpnn", "mask_rate",
                                         "val_fraction")}
    out = Path(args.out)
    pool = {k: v for k, v in report.items() if k != "descriptors"}
    try:
        res = run_pretraining(graphs, hp, seed=args.seed, out_dir=out, resume=args.resume,
                              meta={"pool": pool, "descriptors": report["descriptors"]},
                              progress=not args.no_progress, device=args.device)
    except (ValueError, CheckpointError, FloatingPointError) as exc:  # --resume into another run; divergence
        print(f"graphattn pretrain: {exc}", file=sys.stderr)
        return 2
    res.pop("model")
    meta = {k: v for k, v in res.pop("meta").items() if k not in ("pool", "descriptors")}  # both once, below
    write_metrics(out / "metrics.json", {"pool": pool, "descriptors": report["descriptors"], **res, "meta": meta},
                  environment=True)
    acc = res["val_masked_atom"].get("atomic_num", {})
    mae = res["val_descriptor_mae"]
    print(f"pretrained on {report['molecules']} molecules ({res['counts']['train']} train / "
          f"{res['counts']['val']} val): best epoch {res['best_epoch']}/{res['epochs_run']} | val descriptor MAE "
          f"{'n/a' if mae is None else f'{mae:.4f}'} (standardised) | masked element accuracy "
          f"{acc.get('accuracy', float('nan')):.3f} (majority {acc.get('majority', float('nan')):.3f}) | "
          f"{res['seconds_per_epoch']:.1f} s/epoch")
    print(f"Wrote {out / 'best.pt'} and {out / 'metrics.json'}; fine-tune with: "
          f"graphattn train tox21 --init {out / 'best.pt'}")
    return 0
