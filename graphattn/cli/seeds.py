"""``graphattn train ... --seeds 0 1 2``: one run per seed into ``OUT/seed_N/``, then one summary of
every metric over the seeds (mean ± sample standard deviation), as the docs' tables are reported."""
from __future__ import annotations

import copy
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Dict

from graphattn.train.checkpoint import write_metrics

__all__ = ["run_seeds", "seed_summary"]

_SPLITS = ("train", "val", "test")


def _is_metric(key: str, value: Any) -> bool:
    """A split's metric (not a count such as ``num_molecules`` or ``tasks_evaluated``)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and not key.startswith(("num_", "tasks_")))


def seed_summary(runs: Dict[int, Dict[str, Any]]) -> Dict[str, Any]:
    """``{split: {metric: {"mean", "std", "values"}}}`` over the seeds' ``metrics.json`` (``runs``: seed →
    its contents); ``std`` is the sample standard deviation (``None`` for one seed); a metric undefined in a
    seed (``null``) is left out of that seed's values."""
    out: Dict[str, Any] = {}
    for split in _SPLITS:
        keys = [k for r in runs.values() for k, v in (r.get(split) or {}).items() if _is_metric(k, v)]
        table = {}
        for key in dict.fromkeys(keys):
            values = [float(r[split][key]) for r in runs.values()
                      if isinstance((r.get(split) or {}).get(key), (int, float)) and math.isfinite(r[split][key])]
            if values:
                table[key] = {"mean": statistics.fmean(values),
                              "std": statistics.stdev(values) if len(values) > 1 else None, "values": values}
        if table:
            out[split] = table
    return out


def _line(split: str, table: Dict[str, Any]) -> str:
    parts = []
    for key, s in table.items():
        if key == "loss":
            continue
        parts.append(f"{key} {s['mean']:.4f}" + (f" ± {s['std']:.4f}" if s["std"] is not None else ""))
    return f"{split}: " + " | ".join(parts)


def run_seeds(args, run: Callable[[Any], int]) -> int:
    """Train once per seed of ``args.seeds`` with ``run`` (a pipeline's train command) into
    ``OUT/seed_N/`` and write ``OUT/summary.json``; the first failing seed's exit status stops it."""
    if not args.out:
        print("graphattn train: --seeds needs --out (each seed runs into OUT/seed_N/)", file=sys.stderr)
        return 2
    if len(set(args.seeds)) != len(args.seeds):
        print(f"graphattn train: --seeds {' '.join(map(str, args.seeds))} repeats a seed", file=sys.stderr)
        return 2
    out = Path(args.out)
    runs: Dict[int, Dict[str, Any]] = {}
    for k, seed in enumerate(args.seeds):
        print(f"== seed {seed} ({k + 1}/{len(args.seeds)}) -> {out / f'seed_{seed}'}", flush=True)
        one = copy.copy(args)
        one.seed, one.seeds, one.out = seed, None, str(out / f"seed_{seed}")
        rc = run(one)
        if rc != 0:
            return rc
        runs[seed] = json.loads((out / f"seed_{seed}" / "metrics.json").read_text())
    summary = {"seeds": list(args.seeds), "runs": [f"seed_{s}" for s in args.seeds], "metrics": seed_summary(runs)}
    write_metrics(out / "summary.json", summary, environment=True)
    print(f"\n{len(runs)} seeds ({' '.join(map(str, args.seeds))}), mean ± std:")
    for split in ("val", "test"):
        if split in summary["metrics"]:
            print("  " + _line(split, summary["metrics"][split]))
    print(f"Wrote {out / 'summary.json'}")
    return 0
