"""Tox21: our GraphClassifier (Laplacian PE + a global token) vs a PyG baseline of the same
width and depth, trained by the same loop on the same splits, over several seeds.

    python examples/tox21.py                                   # scaffold + random, seeds 0 1 2
    python examples/tox21.py --split scaffold --seeds 0 --epochs 5 --limit 1000   # quick look
    python examples/tox21.py --ensemble 5                      # 5 models per seed, probabilities averaged

Prints one line per epoch and a final table (mean ± std test ROC-AUC over seeds, per split
and model) and writes every number to ``--out`` (JSON). The scaffold split is deterministic
(the seed changes only the initialisation and batch order); the random split changes with
the seed. Data: ``$GRAPHATTN_DATA/tox21/tox21.csv[.gz]`` or a download from MoleculeNet.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from graphattn.tasks.molecules import data as md
from graphattn.tasks.molecules import defaults as molecule_defaults
from graphattn.tasks.molecules import pipeline as mp
from graphattn.tasks.molecules.recipe import MoleculeRecipe


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--split", nargs="+", default=["scaffold", "random"], choices=molecule_defaults.SPLITS)
    p.add_argument("--models", nargs="+", default=["ours", "baseline"], choices=["ours", "baseline"])
    p.add_argument("--baseline", default="gine", choices=["gine", "gat"], help="PyG baseline layer")
    d = molecule_defaults.defaults_for("classification")
    p.add_argument("--epochs", type=int, default=d["epochs"])
    p.add_argument("--patience", type=int, default=d["patience"])
    p.add_argument("--lr", type=float, default=d["lr"])
    p.add_argument("--weight-decay", type=float, default=d["weight_decay"])
    p.add_argument("--batch-size", type=int, default=d["batch_size"])
    p.add_argument("--schedule", default=d["schedule"], choices=["constant", "cosine"],
                   help="learning-rate schedule (cosine: decayed over --epochs)")
    p.add_argument("--warmup", type=int, default=d["warmup"], help="epochs of linear learning-rate warm-up")
    p.add_argument("--hidden", type=int, default=d["hidden"])
    p.add_argument("--layers", type=int, default=d["layers"])
    p.add_argument("--heads", type=int, default=d["heads"])
    p.add_argument("--dropout", type=float, default=d["dropout"])
    p.add_argument("--global-tokens", type=int, default=d["global_tokens"])
    p.add_argument("--pe-dim", type=int, default=d["pe_dim"], help="Laplacian PE size K (0 = none)")
    p.add_argument("--pe-kind", default=d["pe_kind"], choices=list(molecule_defaults.PE_KINDS),
                   help="Laplacian eigenvectors or RWSE (random-walk return probabilities) of --pe-dim steps")
    p.add_argument("--hops", type=int, default=d["hops"],
                   help="attention also between atoms up to K bonds apart, with a hop-distance edge feature "
                        "(every model of --models reads the same graphs)")
    p.add_argument("--readout", default=d["readout"], choices=["mean", "sum", "max", "token"])
    p.add_argument("--local-mpnn", default=d["local_mpnn"], choices=["gine", "gin"],
                   help="GraphGPS-style message-passing branch next to the attention (default: none)")
    p.add_argument("--descriptors", action=argparse.BooleanOptionalAction, default=d["descriptors"],
                   help="every model also reads ~200 RDKit 2-D molecule descriptors in its head (chemprop-style)")
    p.add_argument("--ensemble", type=int, default=1,
                   help="train N models per seed on the same split and average their probabilities "
                        "(chemprop's --ensemble_size); every model of --models gets the same N")
    p.add_argument("--init", default=None, metavar="PRE.pt",
                   help="start our model from a graphattn pretrain checkpoint (its width, depth, heads, tokens "
                        "and PE size replace those options, for the baseline too, which trains from scratch)")
    p.add_argument("--pos-weight", action="store_true", help="weight positives per task")
    p.add_argument("--limit", type=int, default=None, help="first N molecules only (smoke runs)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (1 is fastest on a busy 2-core machine)")
    p.add_argument("--progress", action="store_true", help="tqdm bars")
    p.add_argument("--out", default="runs/tox21_results.json")
    return p.parse_args(argv)


def _mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _f(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def summarize(args, hp, ds, runs, t0, final: bool) -> dict:
    """Mean ± std over seeds per split and model; written to --out after every run, so an
    interrupted run keeps what it finished; printed as a table when ``final``."""
    table = []
    for split in args.split:
        for name in dict.fromkeys(r["model"] for r in runs):
            sel = [r for r in runs if r["split"] == split and r["model"] == name]
            if not sel:
                continue
            test_m, test_s = _mean_std([r["test"]["roc_auc"] for r in sel])
            val_m, val_s = _mean_std([r["val"]["roc_auc"] for r in sel])
            table.append({"split": split, "model": name, "seeds": len(sel), "params": sel[0]["num_parameters"],
                          "test_roc_auc_mean": test_m, "test_roc_auc_std": test_s,
                          "val_roc_auc_mean": val_m, "val_roc_auc_std": val_s,
                          "test_pr_auc_mean": _mean_std([r["test"]["pr_auc"] for r in sel])[0],
                          "epochs_mean": statistics.fmean(r["epochs_run"] for r in sel),
                          "seconds_per_epoch": statistics.fmean(r["seconds_per_epoch"] for r in sel)})
    result = {"config": vars(args), "hparams": hp.to_dict(), "num_molecules": len(ds),
              "skipped_rows": [s[0] for s in ds.skipped], "table": table, "runs": runs,
              "seconds": time.time() - t0, "complete": final}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    if final:
        print(f"\nTox21 test ROC-AUC, mean ± std over seeds {args.seeds} ({time.time() - t0:.0f}s total)")
        print(f"{'split':<18} {'model':<8} {'params':>7} {'test ROC-AUC':>16} {'val ROC-AUC':>16} "
              f"{'test PR-AUC':>11} {'epochs':>6} {'s/epoch':>8}")
        for row in table:
            print(f"{row['split']:<18} {row['model']:<8} {row['params']:>7} "
                  f"{_f(row['test_roc_auc_mean']):>9} ± {_f(row['test_roc_auc_std'])} "
                  f"{_f(row['val_roc_auc_mean']):>9} ± {_f(row['val_roc_auc_std'])} "
                  f"{_f(row['test_pr_auc_mean']):>11} {row['epochs_mean']:>6.1f} {row['seconds_per_epoch']:>8.1f}")
        print(f"Wrote {out}")
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # the recipe's fields this script has an option for (the others: classification's defaults)
    hp = MoleculeRecipe.from_dict({k: getattr(args, k) for k in MoleculeRecipe.fields() if hasattr(args, k)})
    if args.init:
        from graphattn.tasks.molecules.finetune import load_pretrained

        pre = load_pretrained(args.init)[1]["hparams"]
        hp = hp.replace(**{k: pre[k] for k in molecule_defaults.ARCH_KEYS if k in pre})
        args.pe_dim, args.pe_kind = hp.pe_dim, hp.pe_kind
    descriptors = md.descriptor_set(args.descriptors)
    ds = md.load_dataset("tox21", pe_dim=args.pe_dim if "ours" in args.models else 0, limit=args.limit,
                         log=args.progress, descriptors=descriptors, pe_kind=args.pe_kind, hops=args.hops)
    print(f"Tox21: {len(ds)} molecules ({len(ds.skipped)} of {ds.num_rows} skipped: invalid SMILES), "
          f"{len(ds.task_names)} tasks | {vars(args)}")
    runs, t0 = [], time.time()
    for split in args.split:
        for seed in args.seeds:
            idx = md.split_indices(ds, split, seed)
            for model in args.models:
                spec = mp.model_spec("none" if model == "ours" else args.baseline, len(ds.task_names), hp,
                                     graph_feature_dim=len(descriptors or ()))
                name = ("ours" + ("+pre" if args.init else "") if model == "ours" else args.baseline) \
                    + (f"x{args.ensemble}" if args.ensemble > 1 else "")
                tag = f"[{split} {name} seed {seed}]"
                res = mp.run_ensemble(ds, idx, spec, hp, size=args.ensemble, seed=seed, pos_weight=args.pos_weight,
                                      progress=args.progress, log=lambda m, tag=tag: print(tag, m, flush=True),
                                      init=args.init if model == "ours" else None)
                res.pop("model"), res.pop("meta")
                runs.append({"split": split, "model": name, "class": spec.name, "seed": seed,
                             "sizes": [len(i) for i in idx], **res})
                for c in res.get("ensemble_curve", []):
                    print(f"{tag} ensemble of {c['members']}: val auc {_f(c.get('val_roc_auc'))} | "
                          f"test auc {_f(c.get('test_roc_auc'))}", flush=True)
                print(f"{tag} best epoch {res['best_epoch']} | val auc {_f(res['val']['roc_auc'])} | "
                      f"test auc {_f(res['test']['roc_auc'])} | {res['num_parameters']} params | "
                      f"{time.time() - t0:.0f}s elapsed", flush=True)
                summarize(args, hp, ds, runs, t0, final=False)
    result = summarize(args, hp, ds, runs, t0, final=True)
    return result


if __name__ == "__main__":
    main()
