"""Fine-tuning from a ``graphattn pretrain`` checkpoint (:mod:`graphattn.tasks.molecules.pretrain`): load its
backbone into a new :class:`~graphattn.GraphClassifier`, check that the shapes agree, and keep
the provenance (which checkpoint, its sha256) in the fine-tuned run's metadata."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from torch import Tensor, nn

from graphattn.data.download import sha256sum
from graphattn.data.molecules import FEATURIZER_VERSION
from graphattn.nn.models.graph_transformer import GraphClassifier
from graphattn.nn.models.registry import ModelSpec
from graphattn.train.checkpoint import CheckpointError, load_checkpoint

__all__ = ["load_pretrained", "load_pretrained_backbone", "apply_init"]

#: GraphClassifier kwargs that are not the backbone's.
_HEAD_KEYS = ("num_tasks", "readout", "graph_feature_dim")


def backbone_kwargs(classifier_kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The :class:`~graphattn.GraphTransformer` kwargs inside a GraphClassifier's kwargs."""
    return {k: v for k, v in classifier_kwargs.items() if k not in _HEAD_KEYS}


def _shape_kwargs(kw: Dict[str, Any]) -> Dict[str, Any]:
    """The kwargs that decide the backbone's computation (dropout rates do not)."""
    return {k: v for k, v in kw.items() if k not in ("dropout", "attn_dropout")}


def load_pretrained(path) -> Tuple[Dict[str, Tensor], Dict[str, Any]]:
    """``(backbone state dict, meta)`` of a ``graphattn pretrain`` checkpoint (``best.pt`` or
    ``last.pt``; ``weights_only=True``). Raises ``ValueError`` for another kind of checkpoint
    or one made with another featurizer version."""
    ck = load_checkpoint(path)
    meta = ck.get("meta") or {}
    if meta.get("pipeline") != "pretrain":
        raise ValueError(f"{path} is not a pretraining checkpoint (pipeline {meta.get('pipeline')!r}); "
                         "make one with graphattn pretrain --csv FILE ... --out DIR (DIR/best.pt)")
    if str(meta.get("featurizer_version")) != FEATURIZER_VERSION:
        raise ValueError(f"{path} was pretrained with featurizer version {meta.get('featurizer_version')!r}, "
                         f"this graphattn featurizes molecules with {FEATURIZER_VERSION!r}: pretrain again")
    if not isinstance(meta.get("backbone"), dict) or not isinstance(ck.get("model"), dict):
        raise ValueError(f"{path} is an incomplete pretraining checkpoint (no backbone settings or weights); "
                         "use the best.pt or last.pt graphattn pretrain wrote")
    state = {k[len("backbone."):]: v for k, v in ck["model"].items() if k.startswith("backbone.")}
    return state, meta


def load_pretrained_backbone(model: nn.Module, path, spec_kwargs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Copy the pretrained backbone of ``path`` into ``model`` (a
    :class:`~graphattn.GraphClassifier` built with the same backbone settings; its head is left
    as initialised). Width, depth, heads, global tokens, PE size and kind and the local MPNN
    branch are compared (the number of heads regroups weights of the same shapes, so a state
    dict alone would load silently); ``spec_kwargs`` (the model's constructor kwargs, as
    :func:`graphattn.tasks.molecules.pipeline.run_training` passes them) adds every other setting.
    Returns the pretraining meta. Raises ``ValueError`` naming the differing settings."""
    state, meta = load_pretrained(path)
    if not isinstance(model, GraphClassifier):
        raise ValueError(f"--init needs our GraphClassifier, not {type(model).__name__} (no --baseline)")
    bb, want = model.backbone, _shape_kwargs(meta["backbone"])
    first = bb.blocks[0] if len(bb.blocks) else None
    have = {"hidden_channels": bb.hidden_channels, "num_layers": bb.num_layers,
            "num_global_tokens": bb.num_global_tokens, "pe_dim": bb.pe_dim, "pe_kind": bb.pe_kind,
            "heads": getattr(first, "heads", want.get("heads")),
            "local_mpnn": getattr(first, "local_mpnn", want.get("local_mpnn"))}
    if spec_kwargs is not None:
        have.update(_shape_kwargs(backbone_kwargs(spec_kwargs)))
    diff = {k: (want.get(k), v) for k, v in have.items() if k in want and want.get(k) != v}
    if diff:
        raise ValueError(f"the pretrained backbone of {path} was built with other settings than this model "
                         f"(setting: (pretrained, this)): {diff}; build the model with the pretrained settings")
    try:
        bb.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"the pretrained backbone of {path} does not fit this model (pretrained with "
                         f"{want}): {str(exc)[:300]}") from exc
    return meta


def apply_init(model: nn.Module, spec: ModelSpec, init, resume_from=None) -> Optional[Dict[str, Any]]:
    """The fine-tuning start of a training run: ``meta["init"]`` for its checkpoints, or None.

    Args:
        model: the freshly built model; init: a pretrain checkpoint or None.
        spec: its :class:`~graphattn.nn.models.registry.ModelSpec` (all backbone settings are compared).
        resume_from: the run's ``last.pt`` when resuming (else None). Its weights replace the
            model's anyway, so the backbone is not loaded again; the record must agree: a run
            started from scratch cannot be resumed "from" a pretrained checkpoint (and vice
            versa a resumed run without ``init`` keeps the record of the one it started from).

    Raises ``ValueError`` for a backbone that does not fit and
    :class:`~graphattn.train.checkpoint.CheckpointError` for a record that disagrees with ``last.pt``.
    """
    prev = None
    if resume_from is not None and Path(resume_from).is_file():
        prev = (load_checkpoint(resume_from).get("meta") or {}).get("init")
    if init is None:
        return prev
    pre = load_pretrained_backbone(model, init, spec.kwargs)
    pool = pre.get("pool") or {}
    record = {"checkpoint": str(Path(init).resolve()), "sha256": sha256sum(init), "molecules": pool.get("molecules"),
              "excluded_sources": pool.get("excluded_sources")}  # was this run's test set kept out?
    if resume_from is not None and Path(resume_from).is_file() and (prev or {}).get("sha256") != record["sha256"]:
        if prev is not None and prev.get("checkpoint") == record["checkpoint"]:  # same file, new contents
            raise CheckpointError(f"--resume: {resume_from} was started from {init}, whose contents changed "
                                  f"since (sha256 {str(prev.get('sha256'))[:12]}... then, {record['sha256'][:12]}... "
                                  "now: pretraining went on or was redone); resuming would mix two backbones — "
                                  "drop --init to resume as recorded, or choose another output folder")
        raise CheckpointError(f"--resume: {resume_from} was "
                              + ("trained from scratch" if prev is None else f"started from {prev.get('checkpoint')}")
                              + f", not from --init {init}; drop --init or choose another output folder")
    return record
