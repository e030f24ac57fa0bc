"""Every option of the ``graphattn`` command line, in one module that imports no torch: ``graphattn --help``
and a command's ``--help`` answer at once, and a command imports what it needs after parsing."""
from __future__ import annotations

import argparse
from typing import Any, Mapping, Optional

from graphattn.cli.options import DATA_ROOT_HELP, DEVICE_HELP, TASK_TYPES
from graphattn.train.config import LOSSES, METRICS
from graphattn.tasks.molecules.defaults import PE_KINDS
from graphattn.tasks.molecules.recipe import DEFAULT_DESCRIPTORS, DESCRIPTORS
from graphattn.tasks.molecules.defaults import PRETRAIN_DEFAULTS as D
from graphattn.tasks.molecules.defaults import SPLITS

__all__ = ["build_parser", "add_train_arguments", "train_option_parser", "add_tune_parser", "TUNE_ONLY", "add_common_train_arguments", "add_molecule_train_arguments", "add_social_train_arguments",
           "add_pretrain_parser"]
def add_common_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", default=None,
                   help="named dataset (e.g. karate, cora, facebook, twitch-de, imdb-binary, tox21, bbbp); "
                        "omit when giving --csv / --edges / --tu-text")
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=int, default=None, help="training epochs (default: per dataset)")
    g.add_argument("--lr", type=float, default=None, help="learning rate (default: per dataset)")
    g.add_argument("--weight-decay", type=float, default=None, help="L2 weight decay (default: per dataset)")
    g.add_argument("--schedule", default=None, choices=["constant", "cosine"],
                   help="learning-rate schedule: constant, or cosine decay over --epochs (default: per dataset)")
    g.add_argument("--warmup", type=int, default=None,
                   help="epochs of linear learning-rate warm-up (default: per dataset)")
    g.add_argument("--grad-clip", type=float, default=None,
                   help="clip the gradient norm to this value before each step (default 5; 0 = no clipping)")
    g.add_argument("--task-type", default=None, choices=list(TASK_TYPES),
                   help="classification (0/1 or class labels) or regression (numeric targets, standardised on "
                        "the training split; predictions in the original units); default: the named dataset's, "
                        "else classification")
    g.add_argument("--loss", default=None, choices=list(LOSSES["regression"]),
                   help="regression loss: mse (default) or l1 (mean absolute error)")
    g.add_argument("--metric", default=None, choices=sorted({m for ms in METRICS.values() for m in ms}),
                   help="validation metric that selects the best epoch and drives early stopping (default: "
                        "roc_auc for binary tasks, accuracy for classes, mae for regression; also pr_auc, rmse, r2)")
    g.add_argument("--batch-size", type=int, default=64, help="graphs per batch (graph-level tasks)")
    g.add_argument("--patience", type=int, default=None, help="early-stopping patience in epochs")
    g.add_argument("--seed", type=int, default=0, help="seed of initialisation, batch order and random splits "
                                                      "(default 0)")
    g.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                   help="one run per seed into OUT/seed_N/ and OUT/summary.json with every metric's mean ± std "
                        "over them (needs --out)")
    g.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's; small molecules and graphs are often "
                        "fastest with 1 on a busy machine)")
    g.add_argument("--out", default=None, help="output folder (metrics.json, best.pt, last.pt)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    g.add_argument("--overwrite", action="store_true", help="replace the run already in --out (without it, "
                                                            "a folder holding a run is refused)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--distributed", action="store_true",
                   help="data-parallel training across the processes started by torchrun "
                        "(gloo on CPU, NCCL on GPU); only rank 0 writes files")
    g.add_argument("--limit", type=int, default=None,
                   help="smoke runs: only the first N valid molecules; for graph sets a seeded random N graphs "
                        "(the files are sorted by label)")
    g.add_argument("--device", default="auto", help=DEVICE_HELP)
    g.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    m = p.add_argument_group("model")
    m.add_argument("--hidden", type=int, default=None, help="hidden channels (default: per dataset)")
    m.add_argument("--layers", type=int, default=None, help="transformer blocks (default: per dataset)")
    m.add_argument("--heads", type=int, default=None, help="attention heads (default 4)")  # None: given or not
    m.add_argument("--dropout", type=float, default=None, help="dropout (default: per dataset)")
    m.add_argument("--global-tokens", type=int, default=None, help="global tokens per graph")
    m.add_argument("--pe-dim", type=int, default=None, help="Laplacian PE size (0 = none)")
    m.add_argument("--pe-kind", default=None, choices=list(PE_KINDS),
                   help="molecules: the positional encoding of size --pe-dim: Laplacian eigenvectors (default), "
                        "RWSE, random-walk return probabilities of --pe-dim steps, or RRWP, the relative random-walk "
                        "probabilities of every attended pair as edge features of every layer (GRIT's)")
    m.add_argument("--hops", type=int, default=None,
                   help="molecules: attention also between atoms up to K bonds apart, told apart by a hop-distance "
                        "edge feature (default 1: the bonds only)")
    m.add_argument("--readout", default=None, choices=["mean", "sum", "max", "token"],
                   help="graph-level tasks: pooling of the node states (token = the global tokens' state; "
                        "default: per dataset)")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Every option of ``graphattn train``."""
    add_common_train_arguments(p)
    add_molecule_train_arguments(p)
    add_social_train_arguments(p)
    p.add_argument("--config", default=None, metavar="FILE",
                   help="a JSON file of option values (e.g. OUT/best_config.json of graphattn tune): "
                        "{\"lr\": 0.0005, \"hidden\": 128, ...}; the flags given on the command line override it")


def train_option_parser() -> argparse.ArgumentParser:
    """A parser of ``graphattn train``'s options alone (what a ``--config`` file may set)."""
    p = argparse.ArgumentParser(prog="graphattn train", add_help=False)
    add_train_arguments(p)
    return p


def build_parser(config: Optional[Mapping[str, Any]] = None) -> argparse.ArgumentParser:
    """The ``graphattn`` parser; ``config`` (option destinations -> values, from ``train --config FILE``)
    become ``train``'s defaults, so that the flags of the command line override them."""
    parser = argparse.ArgumentParser(prog="graphattn", description="Graph self-attention toolkit")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a model and write OUT/metrics.json and OUT/best.pt")
    add_train_arguments(train)
    if config:
        train.set_defaults(**config)
    add_tune_parser(sub)
    for name, helptext in (("evaluate", "evaluate a checkpoint on its test split or on --csv"),
                           ("predict", "per-task probabilities / class predictions"),
                           ("explain", "draw what the model attends to (molecule or ego-graph)")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--checkpoint", required=True, help="path to best.pt")
        p.add_argument("--csv", default=None, help="molecules: CSV with a SMILES column (labelled for evaluate)")
        p.add_argument("--smiles-col", default="smiles", help="molecules: SMILES column of --csv")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
        if name != "evaluate":
            p.add_argument("--smiles", nargs="+", default=None, help="molecules: SMILES strings")
            p.add_argument("--out", default=None, help="output file (predictions CSV or picture PNG), or an "
                                                       "existing folder to write the default file name into")
        for flag, what in (("--edges", "edges CSV"), ("--target", "target CSV"), ("--features", "features JSON"),
                           ("--tu-text", "--tu-text file or folder")):
            p.add_argument(flag, default=None, help=f"social: where the run's {what} is now (the files moved); "
                                                     "the recorded sha256 still checks the contents")
        if name == "predict":
            p.add_argument("--similarity", action="store_true",
                           help="molecules: add each input's highest Tanimoto similarity (Morgan, radius 2) to the "
                                "model's training molecules and that molecule (train_similarity, nearest_train)")
        if name == "explain":
            p.add_argument("--node", type=int, default=None, help="social: node id whose ego-graph to draw")
            p.add_argument("--hops", type=int, default=1, help="social: ego-graph radius")
            p.add_argument("--task", default=None, help="molecules: also draw this task's attribution "
                                                        "(attention × gradient) beside the rollout")
            p.add_argument("--top-k", type=int, default=None, help="the k most attended atoms named in the "
                                                                   "text (molecules, default 3) or nodes "
                                                                   "labelled (social, default 10)")

    add_pretrain_parser(sub)
    ex = sub.add_parser("export", help="a molecule checkpoint as a torch.export program (.pt2) and its "
                                       "featurisation record (.pt2.json)")
    ex.add_argument("--checkpoint", required=True, help="path to best.pt (a molecule checkpoint)")
    ex.add_argument("--out", default=None, help="the program's file (default: the checkpoint's name with .pt2), "
                                                "or an existing folder to write model.pt2 into")
    dl = sub.add_parser("download", help="fetch named datasets into a data folder (canonical URLs, checked)")
    dl.add_argument("names", nargs="+", metavar="NAME", help="dataset names (e.g. tox21 esol cora facebook mutag zinc)")
    dl.add_argument("--root", default=None, metavar="DIR",
                    help="data folder to write into (default: $GRAPHATTN_DATA, else the checkout's datasets/, "
                         "else ~/.cache/graphattn); the tests read GRAPHATTN_DATA=DIR")
    bench = sub.add_parser("bench", help="run a benchmark script from benchmarks/")
    bench.add_argument("name", nargs="?", default="attention",
                       help="script of benchmarks/ (default attention; e.g. large_graph, tox21_epoch, variants)")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    return parser



def add_molecule_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Molecule options of ``graphattn train``. ``--baseline`` is shared with the social tasks:
    whichever pipeline adds its options first defines it (no ``choices``); each validates its
    own values (none|gine|gat here) in ``train``."""
    g = parser.add_argument_group("molecules")
    g.add_argument("--csv", default=None, help="train on any CSV (or .csv.gz) with a SMILES column and 0/1 task "
                                                "columns (numeric ones with --task-type regression) instead of "
                                                "a named dataset")
    g.add_argument("--smiles-col", default="smiles", help="SMILES column of --csv (default: smiles)")
    g.add_argument("--tasks", default=None,
                   help="comma-separated task names, matched case-insensitively; names containing commas "
                        "(SIDER) are recognised (default: every task; for --csv every column of 0/1 labels)")
    g.add_argument("--split-col", default=None, metavar="COL",
                   help="a column of --csv naming each molecule's split (train / val / test, any case) instead "
                        "of --split; a named set with its own split (zinc) uses it by default")
    g.add_argument("--split", choices=SPLITS, default="scaffold",
                   help="scaffold (deterministic Bemis-Murcko, chemprop's order; default), deepchem_scaffold "
                        "(the same with DeepChem's tie order: other val/test molecules), random or "
                        "balanced_scaffold (seeded)")
    g.add_argument("--pos-weight", action="store_true",
                   help="weight positives by negatives/positives per task (training split)")
    g.add_argument("--local-mpnn", default=None, choices=["gine", "gin"],
                   help="our model: add a GraphGPS-style GINE/GIN branch next to the attention in every block "
                        "(molecules; graph sets such as imdb-binary take gin: they have no edge features)")
    g.add_argument("--descriptors", nargs="?", const="rdkit2d", default=None, choices=list(DESCRIPTORS),
                   help="molecule descriptors fed to the head: rdkit2d (~200 RDKit 2-D descriptors, standardised on "
                        "the training split; the flag alone), rdkit2d_normalized (chemprop's v1_rdkit_2d_normalized: "
                        "CDF-normalised by descriptastorus, read as they are) or none; default "
                        + ", ".join(f"{v} for {k}" for k, v in DEFAULT_DESCRIPTORS.items()))
    g.add_argument("--no-descriptors", dest="descriptors", action="store_const", const="none",
                   help="no molecule descriptors (--descriptors none)")
    g.add_argument("--ensemble", type=int, default=None, metavar="N",
                   help="train N models on the same split (seeds S, S+1000, ...) and average their "
                        "probabilities (chemprop's --ensemble_size); one checkpoint holds them all (default: 1)")
    g.add_argument("--init", default=None, metavar="PRE.pt",
                   help="start our model's backbone from a graphattn pretrain checkpoint (its width, depth, "
                        "heads, global tokens and PE size are taken from it; the head starts fresh)")
    if "--baseline" not in parser._option_string_actions:  # shared with the social tasks; each validates
        g.add_argument("--baseline", default="none",
                       help="train a PyG model of the same width and depth instead of ours: molecules "
                            "gine|gat, social networks gcn|gat|transformer|gin (default: none)")



def add_social_train_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("social networks")
    g.add_argument("--edges", default=None, help="edges CSV of a graph in the MUSAE/FEATHER release format")
    g.add_argument("--target", default=None, help="target CSV (node id column + label column) for --edges")
    g.add_argument("--features", default=None, help="optional features JSON {node id: [feature ids]} for --edges")
    g.add_argument("--target-col", default=None, help="label column of --target (default: auto-detected)")
    g.add_argument("--id-col", default=None,
                   help="node id column of --target (default: new_id, id, node_id, node, numeric_id, else the first "
                        "column named *_id / *Id, else the first column)")
    g.add_argument("--max-features", default=None,
                   help="node sets: keep the N most frequent feature ids of a features file, or 'all' (default: "
                        "all that fit a dense x of 1 GiB, with a warning when some are cut)")
    g.add_argument("--tu-text", default=None,
                   help="graph classification set: a file in the DGCNN/GIN text format, or the TU original "
                        "format (a folder with NAME_A.txt, NAME_graph_indicator.txt, NAME_graph_labels.txt, or "
                        "its NAME_A.txt)")
    g.add_argument("--folds", type=int, default=None,
                   help="k-fold cross-validation for graph classification (10 uses the dataset's "
                        "10fold_idx files when present); reports mean ± std")
    if "--baseline" not in parser._option_string_actions:  # shared with the molecule tasks
        g.add_argument("--baseline", default="none",
                       help="train a PyG model of the same depth and width instead of ours: "
                            "social: gcn | gat | transformer (GCNConv, GATConv, TransformerConv); "
                            "molecules: gine | gat")
    g.add_argument("--mini-batch", nargs="?", const="partition", default=None, choices=("partition", "neighbor"),
                   help="node classification in mini-batches (graphs too large for full batch): "
                        "'partition' (the default) trains on induced subgraphs of graph partitions, "
                        "'neighbor' on sampled neighbourhoods of 1024 seed nodes (GraphSAGE; --num-neighbors)")
    g.add_argument("--num-neighbors", default=None,
                   help="with --mini-batch neighbor: incoming edges sampled per node and hop, comma-separated "
                        "(all or -1 = every edge, e.g. 10,all or --num-neighbors=-1,-1; default 10 per attention "
                        "layer)")
    g.add_argument("--attn-dropout", type=float, default=None, help="node sets: dropout on attention weights")
    g.add_argument("--input-dropout", type=float, default=None,
                   help="node sets: dropout on the input features (default: --dropout)")
    g.add_argument("--propagation", type=int, default=None,
                   help="node sets: K steps of APPNP propagation of our logits (0 = none)")
    g.add_argument("--propagation-alpha", type=float, default=None, help="node sets: APPNP teleport a")
    g.add_argument("--propagation-learned", default=None, action=argparse.BooleanOptionalAction,
                   help="node sets: learn the K+1 hop weights of the propagation (GPR-GNN), "
                        "initialised to APPNP's")
    g.add_argument("--gcn-weight", type=float, default=None,
                   help="node sets: weight w in [0, 1) of a GCN branch next to our attention (SGFormer)")
    g.add_argument("--gcn-layers", type=int, default=None, help="node sets: GCN layers of that branch (default 1)")
    g.add_argument("--propagation-dropout", type=float, default=None,
                   help="node sets: edge dropout on Â in each training propagation step (APPNP)")
    g.add_argument("--self-loops", default=None, action=argparse.BooleanOptionalAction,
                   help="node sets: each node also attends to itself")
    g.add_argument("--label-input", default=None, action=argparse.BooleanOptionalAction,
                   help="node sets: training labels as input columns (UniMP), for every model alike")
    g.add_argument("--consistency", type=int, default=None,
                   help="node sets: S >= 2 dropout passes per training step with GRAND's consistency "
                        "loss on every node (0 or 1 = off), for every model alike")
    g.add_argument("--consistency-weight", type=float, default=None, help="node sets: weight of that loss (1.0)")
    g.add_argument("--consistency-temperature", type=float, default=None,
                   help="node sets: sharpening temperature in (0, 1] of its target (0.5)")



#: ``graphattn tune`` options that ``train`` does not have (left out of the best configuration it writes)
TUNE_ONLY = ("trials", "timeout", "storage", "study_name", "top")


def add_tune_parser(sub) -> argparse.ArgumentParser:
    """``graphattn tune``: the molecule options of ``train`` (those given are fixed for every trial) and
    the search's own."""
    p = sub.add_parser("tune", help="search the molecule recipe on the validation split (Optuna) and write "
                                    "OUT/best_config.json for train --config")
    add_common_train_arguments(p)
    add_molecule_train_arguments(p)
    g = p.add_argument_group("search")
    g.add_argument("--trials", type=int, default=20,
                   help="finished trials the study should hold (a resumed study runs only the missing ones; "
                        "default 20)")
    g.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="stop starting trials after this")
    g.add_argument("--storage", default=None, metavar="FILE.db",
                   help="SQLite file of the study: run the same command again to continue it (default OUT/tune.db)")
    g.add_argument("--study-name", default=None, help="name of the study in --storage (default: dataset-model)")
    g.add_argument("--top", type=int, default=10, help="trials in the final table (default 10)")
    return p


def add_pretrain_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("pretrain", help="pretrain the molecule backbone on unlabelled SMILES files "
                                        "(masked atoms + RDKit descriptors); fine-tune with train --init")
    p.add_argument("--csv", nargs="+", required=True, metavar="FILE",
                   help="CSV (or .csv.gz) files with a SMILES column; other columns are ignored")
    p.add_argument("--smiles-col", default="smiles",
                   help="SMILES column name(s), comma-separated: the first one present in each file's header "
                        "is used, case-insensitively (default: smiles; e.g. smiles,mol for BACE)")
    p.add_argument("--exclude", nargs="+", default=[], metavar="SET",
                   help="leave out every molecule of these named MoleculeNet sets (e.g. tox21, bbbp) or "
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
