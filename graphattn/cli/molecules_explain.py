"""``graphattn explain`` for molecule checkpoints: the attention rollout over the atoms (and, with
``--task``, the attribution of one task beside it) drawn per molecule, the most attended atoms named."""
from __future__ import annotations

import sys
from typing import List, Optional

import torch

from graphattn.cli.molecules_predict import checkpoint_inputs
from graphattn.cli.options import usage_error
from graphattn.tasks.molecules.attribution import molecule_attribution
from graphattn.tasks.molecules.data import featurize, graph_options
from graphattn.tasks.molecules.checkpoints import load_model, task_type_of
from graphattn.tasks.molecules.viz import MIN_COLOUR_SPAN, atom_labels, draw_molecule_attention, molecule_attention
from graphattn.utils.files import out_path

__all__ = ["explain", "DEFAULT_TOP_K"]


#: atoms named per picture in explain's text output, when --top-k is not given
DEFAULT_TOP_K = 3


def _explain_options(args, meta: dict):
    """``(task number or None, top_k)`` from --task / --top-k, or ValueError naming the problem
    (an unknown task lists the model's task names)."""
    social = [f for f, v in (("--node", getattr(args, "node", None) is not None),
                             ("--hops", getattr(args, "hops", 1) != 1)) if v]
    if social:
        raise ValueError(f"{', '.join(social)}: for social-network checkpoints (a node's ego-graph); "
                         "a molecule checkpoint explains --smiles / --csv")
    if meta["model"]["class"] != "GraphClassifier":
        raise ValueError("attention pictures need our GraphClassifier, not a --baseline checkpoint")
    if int(meta["model"]["kwargs"].get("num_layers", 1)) < 1:
        raise ValueError("the model has 0 transformer layers (--layers 0): there is no attention to draw")
    tasks = list(meta["task_names"])
    name = getattr(args, "task", None)
    if name is not None and name not in tasks:
        raise ValueError(f"--task {name!r} is not a task of this model; its tasks are: {', '.join(tasks)}")
    top_k = DEFAULT_TOP_K if getattr(args, "top_k", None) is None else args.top_k
    if top_k < 0:
        raise ValueError(f"--top-k must be >= 0, got {top_k}")
    return (None if name is None else tasks.index(name)), top_k


def _top_atoms(labels: List[str], scores: torch.Tensor, k: int) -> str:
    """``"O7 1.00, C6 0.81, N1 0.52"``: the ``k`` highest-scoring atoms, element and index."""
    order = torch.argsort(scores, descending=True, stable=True)[:k].tolist()
    return ", ".join(f"{labels[i]} {float(scores[i]):.2f}" for i in order)


def _explain_one(model, meta: dict, smiles: str, graph, path, task: Optional[int], top_k: int) -> str:
    """Draw one molecule (the rollout; with ``task`` its attribution beside it) and return the
    line that reports it."""
    tasks, regression = meta["task_names"], task_type_of(meta) == "regression"
    prob, scores = molecule_attention(model, graph)
    lines = [f"{t} {p:.3g}" if regression else f"{t} {p:.2f}" for t, p in zip(tasks, prob.tolist())]
    spread = float((scores.max() - scores.min()) / scores.max().clamp_min(1e-12))
    key = "colour: atom score, red = highest" + (
        f"; rollout nearly uniform (spread {spread:.1%})" if spread < MIN_COLOUR_SPAN else "")
    if task is not None:  # the explained task first and apart, the others after it
        explained, lines = f"explained: {lines[task]}", lines[:task] + lines[task + 1:]
        head = [key, explained] + (["others:"] if lines else [])
    else:
        head = [key]
    legend = "\n".join(head + [", ".join(lines[j:j + 4]) for j in range(0, min(len(lines), 24), 4)])
    labels = atom_labels(smiles)
    more, said = [], ""
    if task is not None:
        attribution = molecule_attribution(model, graph, task)[1]
        more = [(f"{tasks[task]}: attention × gradient", attribution)]
        said = f"; {tasks[task]} attribution (attention × gradient) {_top_atoms(labels, attribution, top_k)}"
    draw_molecule_attention(smiles, scores, path, legend=legend, title="attention rollout (every task)",
                            more=more)
    atoms = f"; most attended atoms {_top_atoms(labels, scores, top_k)}" if top_k else ""
    if regression:
        shown = "predicted " + ", ".join(f"{t} {p:.4g}" for t, p in list(zip(tasks, prob.tolist()))[:3])
    else:
        shown = "highest probabilities " + ", ".join(
            f"{t} {p:.3f}" for p, t in sorted(zip(prob.tolist(), tasks), reverse=True)[:3])
    return f"{smiles}: {shown}{atoms}{said if top_k else ''}. Wrote {path}"


def explain(args) -> int:
    """Draw each molecule with atoms and bonds coloured by attention rollout
    (:func:`graphattn.tasks.molecules.viz.molecule_attention`), its atoms numbered, over a colour
    bar, and the per-task probabilities as caption; with ``--task NAME`` that task's attribution
    (:func:`graphattn.tasks.molecules.attribution.molecule_attribution`, attention × gradient)
    in a second panel. To --out (default ``explain.png``; ``OUT/explain.png`` when OUT is a
    folder; with several molecules ``<stem>_<i>.png``). One line per molecule names its
    ``--top-k`` highest-scoring atoms by element and index (``O7``). An invalid SMILES is
    reported on stderr and skipped; the exit status is 2 only when no molecule could be drawn."""
    try:
        model, meta = load_model(args.checkpoint)
        smiles, file_rows = checkpoint_inputs(args, meta, "explain", with_lines=True)
        task, top_k = _explain_options(args, meta)
    except (ValueError, RuntimeError, OSError) as exc:
        return usage_error("explain", str(exc))
    out = out_path(args.out or "explain.png", "explain.png")
    if out.suffix.lower() not in ("", ".png", ".svg"):
        return usage_error("explain", f"--out {out}: molecule pictures are written as .png or .svg, not {out.suffix}")
    if not out.suffix:  # a PNG under a name that says so (as social explain writes)
        out = out.with_suffix(".png")
    if not smiles:
        return usage_error("explain", "no molecules to draw (the input has no rows)")
    graphs = featurize(smiles, **graph_options(meta))
    drawn = 0
    for i, (s, g) in enumerate(zip(smiles, graphs)):
        if isinstance(g, str):  # reported per input, like predict's error column; the others are drawn
            where = f" (file row {file_rows[i]})" if file_rows is not None else ""  # as predict names it
            print(f"graphattn explain: row {i + 1}{where} {s!r}: {g}", file=sys.stderr)
            continue
        path = out if len(smiles) == 1 else out.with_name(f"{out.stem}_{i + 1}{out.suffix}")
        try:
            print(_explain_one(model, meta, s, g, path, task, top_k))
        except OSError as exc:  # unwritable --out (a file as folder, read-only, disk full)
            return usage_error("explain", f"cannot write {path}: {exc.strerror or exc}")
        drawn += 1
    return 0 if drawn else 2  # nothing drawn: every input was invalid
