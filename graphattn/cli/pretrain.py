"""``graphattn pretrain``: self-supervised pretraining of the molecule backbone on SMILES files
(:mod:`graphattn.tasks.molecules.pretrain`); ``graphattn train tox21 --init OUT/best.pt`` fine-tunes from it."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graphattn.cli.options import DATA_ROOT_HELP, DEVICE_HELP, check_rerun, check_train_numbers
from graphattn.data.download import DataFileError
from graphattn.data.molecules import TOXICITY_DATASETS
from graphattn.tasks.molecules.data import spooled
from graphattn.tasks.molecules.pretrain import PRETRAIN_DEFAULTS as D
from graphattn.tasks.molecules.pretrain import run_pretraining
from graphattn.tasks.molecules.pretrain_data import molecule_pool
from graphattn.train.loop import CheckpointError, resolve_device, write_metrics
from graphattn.utils.files import check_out_folder

__all__ = ["add_parser", "pretrain"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("pretrain", help="pretrain the molecule backbone on unlabelled SMILES files "
                                        "(masked atoms + RDKit descriptors); fine-tune with train --init")
    p.add_argument("--csv", nargs="+", required=True, metavar="FILE",
                   help="CSV (or .csv.gz) files with a SMILES column; other columns are ignored")
    p.add_argument("--smiles-col", default="smiles",
                   help="SMILES column name(s), comma-separated: the first one present in each file's header "
                        "is used, case-insensitively (default: smiles; e.g. smiles,mol for BACE)")
    p.add_argument("--exclude", nargs="+", default=[], metavar="SET",
                   help="leave out every molecule of these toxicity sets (tox21, toxcast, clintox, sider) or "
                        "CSV files (matched on the largest fragment, neutralised, stereochemistry ignored, so "
                        "salt forms and stereoisomers go too), e.g. the set you fine-tune and test on")
    p.add_argument("--out", default="runs/pretrain", help="output folder (best.pt, last.pt, metrics.json)")
    p.add_argument("--epochs", type=int, default=D["epochs"], help="pretraining epochs (default %(default)s)")
    p.add_argument("--lr", type=float, default=D["lr"], help="Adam learning rate (default %(default)s)")
    p.add_argument("--weight-decay", type=float, default=D["weight_decay"], help="(default %(default)s)")
    p.add_argument("--batch-size", type=int, default=D["batch_size"], help="molecules per batch (default %(default)s)")
    p.add_argument("--hidden", type=int, default=D["hidden"], help="hidden channels (default %(default)s)")
    p.add_argument("--layers", type=int, default=D["layers"], help="transformer blocks (default %(default)s)")
    p.add_argument("--heads", type=int, default=D["heads"], help="attention heads (default %(default)s)")
    p.add_argument("--global-tokens", type=int, default=D["global_tokens"],
                   help="global tokens per molecule (default %(default)s)")
    p.add_argument("--pe-dim", type=int, default=D["pe_dim"], help="Laplacian PE size (fine-tuning uses the same)")
    p.add_argument("--dropout", type=float, default=D["dropout"], help="(default %(default)s; fine-tuning sets its own)")
    p.add_argument("--local-mpnn", default=None, choices=["gine", "gin"],
                   help="GraphGPS-style message-passing branch in every block (default: none)")
    p.add_argument("--mask-rate", type=float, default=D["mask_rate"], help="fraction of atoms masked (default 0.15)")
    p.add_argument("--val-fraction", type=float, default=D["val_fraction"],
                   help="molecules held out for the validation losses (default 0.05)")
    p.add_argument("--seed", type=int, default=0, help="initialisation, masks and validation split (default 0)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--limit", type=int, default=None, help="read only the first N valid molecules of each file")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


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
        exclude = [src if str(src).lower() in TOXICITY_DATASETS else spooled(src) for src in args.exclude]
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
