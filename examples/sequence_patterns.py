"""Full, truncated (window), strided and global attention on a long-range sequence task.

Task ("copy the first symbol"): a sequence of L random symbols from a vocabulary of V; the
label of *every* token is the symbol at position 0. A token i can only be right (better than
chance 1/V) if information from position 0 reaches it through the attention graph in at most
``--layers`` hops. With window w that is true for the first ``layers * w + 1`` tokens only,
so window attention alone is provably stuck near chance; a global position (Longformer), a
learnable global token, full attention, or a window + stride combination (Sparse
Transformer) all reach every token within two layers.

    python examples/sequence_patterns.py                      # all patterns, a few minutes on CPU
    python examples/sequence_patterns.py --patterns window window+global --epochs 5

Prints one line per epoch and a final table (pattern, edges per sequence, fraction of tokens
that position 0 can reach, the accuracy bound that implies, test accuracy, seconds per epoch)
and writes every number to ``--out`` (JSON).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from graphattn import NodeClassifier, sequence_graph, sequences_to_batch
from graphattn.train import TrainConfig, fit, set_seed

# name -> (sequence_graph pattern, which of window/stride/num_global it uses, learnable tokens)
PATTERNS = {
    "full": ("full", (), 0),
    "window": ("window", ("window",), 0),
    "stride": ("stride", ("stride",), 0),
    "window+stride": (["window", "stride"], ("window", "stride"), 0),
    "window+global": (["window", "global"], ("window", "num_global"), 0),
    "window+token": ("window", ("window",), 1),  # graphattn.GlobalTokens via num_global_tokens
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--patterns", nargs="+", default=list(PATTERNS), choices=list(PATTERNS))
    p.add_argument("--length", type=int, default=128, help="sequence length L")
    p.add_argument("--vocab", type=int, default=8, help="number of symbols V (chance = 1/V)")
    p.add_argument("--train", type=int, default=2048, help="training sequences")
    p.add_argument("--val", type=int, default=256)
    p.add_argument("--test", type=int, default=512)
    p.add_argument("--window", type=int, default=4, help="half-width w of window attention")
    p.add_argument("--stride", type=int, default=8, help="stride s (window+stride needs w >= s/2)")
    p.add_argument("--num-global", type=int, default=1, help="global positions for window+global")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--pe-channels", type=int, default=32, help="sinusoidal PE size (even)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--progress", action="store_true", help="tqdm bars")
    p.add_argument("--out", default="runs/sequence_patterns.json")
    return p.parse_args(argv)


def make_data(n: int, length: int, vocab: int, gen: torch.Generator):
    """Random symbols ``(n, L)`` and labels ``(n, L)``: every token's label is symbol 0."""
    symbols = torch.randint(0, vocab, (n, length), generator=gen)
    return symbols, symbols[:, :1].expand(n, length).contiguous()


def reach_fraction(edge_index: torch.Tensor, length: int, layers: int, tokens: int = 0) -> float:
    """Fraction of the L tokens that information from position 0 reaches in ``layers`` hops.

    Edges are source -> target (target attends to source); ``tokens`` learnable global nodes
    are linked both ways to every token, as :class:`graphattn.GlobalTokens` does.
    """
    src, dst = edge_index
    if tokens:
        tok = torch.arange(length, length + tokens)
        node = torch.arange(length)
        src = torch.cat([src, node.repeat(tokens), tok.repeat_interleave(length)])
        dst = torch.cat([dst, tok.repeat_interleave(length), node.repeat(tokens)])
    seen = torch.zeros(length + tokens, dtype=torch.bool)
    seen[0] = True
    for _ in range(layers):
        seen = seen.clone().index_fill_(0, dst[seen[src]], True)
    return float(seen[:length].float().mean())


def pattern_kwargs(name: str, args) -> dict:
    _, uses, _ = PATTERNS[name]
    return {k: getattr(args, k) for k in uses}


class Batches:
    """Index batches over ``n`` items; reshuffled on every pass when ``shuffle``."""

    def __init__(self, n: int, batch_size: int, shuffle: bool):
        self.n, self.batch_size, self.shuffle = n, batch_size, shuffle

    def __iter__(self):
        order = torch.randperm(self.n) if self.shuffle else torch.arange(self.n)
        return iter(order.split(self.batch_size))


def run_pattern(name: str, data: dict, args) -> dict:
    pattern, _, tokens = PATTERNS[name]
    kwargs = pattern_kwargs(name, args)
    V, L = args.vocab, args.length
    graph = sequence_graph(L, pattern, **kwargs)
    templates = {}  # batch size -> Batch of that many sequences: one edge_index, CSR cached

    def forward(model, idx, split):
        symbols, labels = data[split]
        b = idx.numel()
        if b not in templates:  # x is replaced below; the template holds graph, batch and PE
            templates[b] = sequences_to_batch(torch.zeros(b, L, V), pattern, pe_channels=args.pe_channels,
                                              **kwargs)
        t = templates[b]
        x = F.one_hot(symbols[idx], V).float().view(b * L, V)  # (N, V), sequences back to back
        logits = model(x, t.edge_index, batch=t.batch, pe=t.pe)
        return logits, labels[idx].reshape(-1)

    set_seed(args.seed)
    model = NodeClassifier(V, args.hidden, V, num_layers=args.layers, heads=args.heads,
                           num_global_tokens=tokens, pe_dim=args.pe_channels, pe_kind="linear")
    loaders = {"train": Batches(args.train, args.batch_size, True),
               "val": Batches(args.val, 256, False), "test": Batches(args.test, 256, False)}
    print(f"--- {name}: {graph.size(1)} edges per sequence" + (f" + {tokens} global token" if tokens else ""))
    res = fit(model, loaders, forward,
              TrainConfig(kind="multiclass", epochs=args.epochs, lr=args.lr, seed=args.seed, progress=args.progress),
              log=print)
    reach = reach_fraction(graph, L, args.layers, tokens)
    epoch_s = statistics.median(h["seconds"] for h in res["history"])  # robust to warm-up
    edges = graph.size(1) + tokens * (2 * L + tokens)  # token edges as GlobalTokens adds them
    return {"pattern": name, "edges_per_sequence": edges, "reach": reach,
            "accuracy_bound": reach + (1 - reach) / V, "test_accuracy": res["test"]["accuracy"],
            "val_accuracy": res["val"]["accuracy"], "seconds_per_epoch": epoch_s,
            "best_epoch": res["best_epoch"], **kwargs}


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from graphattn.ops.extension import fused_available

    fused_available()  # builds (or loads) the C++ edge kernel now, not inside the first epoch
    if "window+stride" in args.patterns and 2 * args.window < args.stride:
        print(f"note: window+stride reaches every token in 2 layers only if 2*window >= stride "
              f"(got window={args.window}, stride={args.stride})")
    gen = torch.Generator().manual_seed(args.seed)
    data = {split: make_data(n, args.length, args.vocab, gen)
            for split, n in (("train", args.train), ("val", args.val), ("test", args.test))}
    t0 = time.perf_counter()
    rows = [run_pattern(name, data, args) for name in args.patterns]
    chance = 1.0 / args.vocab
    print(f"\nCopy-the-first-symbol task: L={args.length}, V={args.vocab} (chance {chance:.3f}), "
          f"{args.layers} layers, window={args.window}, stride={args.stride}, "
          f"num_global={args.num_global}; {args.train} training sequences, {args.epochs} epochs\n")
    print("| pattern | edges / sequence | reach of pos. 0 | acc. bound | test acc. | s / epoch (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['pattern']} | {r['edges_per_sequence']} | {r['reach']:.3f} | {r['accuracy_bound']:.3f} "
              f"| {r['test_accuracy']:.3f} | {r['seconds_per_epoch']:.2f} |")
    print(f"\n(reach: fraction of tokens that position 0 reaches in {args.layers} hops; acc. bound = "
          f"reach + (1 - reach)/V, the expected accuracy of a model that is right on every reached token and "
          f"guesses the rest; a finite test set's chance hits scatter around it)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "chance": chance, "results": rows,
                               "total_seconds": time.perf_counter() - t0}, indent=2))
    print(f"Results written to {out} ({time.perf_counter() - t0:.0f} s in all)")
    return rows


if __name__ == "__main__":
    main()
