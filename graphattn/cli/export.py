"""``graphattn export``: a molecule checkpoint as a ``torch.export`` program and the featurisation record
beside it (:func:`graphattn.tasks.molecules.export.export_checkpoint`); ``torch.export.load`` and
:func:`~graphattn.tasks.molecules.export.load_exported` read them back."""
from __future__ import annotations

from pathlib import Path

from graphattn.cli.options import message_of, usage_error
from graphattn.tasks.molecules.export import export_checkpoint
from graphattn.train.checkpoint import CheckpointError, load_checkpoint
from graphattn.utils.files import check_output_not_input, out_path

__all__ = ["export", "SOCIAL_NOT_EXPORTABLE"]

#: why a social-network checkpoint has no program (said in one line by ``graphattn export``)
SOCIAL_NOT_EXPORTABLE = ("social-network models read whole graphs through neighbour sampling and label inputs, "
                         "which is not one tensor signature; use graphattn.load(checkpoint).predict instead")


def export(args) -> int:
    """Write ``--out`` (default: the checkpoint's name with ``.pt2``; an existing folder gets ``model.pt2``)
    and ``--out``.json; one line naming the files and the largest difference from the checkpoint."""
    checkpoint = Path(args.checkpoint)
    out = out_path(args.out, "model.pt2") if args.out else checkpoint.with_suffix(".pt2")
    try:
        meta = load_checkpoint(checkpoint).get("meta") or {}
        pipeline = meta.get("pipeline") if isinstance(meta, dict) else None
        if pipeline != "molecules":
            why = SOCIAL_NOT_EXPORTABLE if pipeline in ("node", "graph") else (
                "a pretraining checkpoint has no task head; fine-tune it first" if pipeline == "pretrain"
                else "not a graphattn training checkpoint (no 'meta.pipeline')")
            raise ValueError(f"{checkpoint}: cannot export: {why}")
        if out.suffix == ".pt":
            raise ValueError(f"--out {out}: a program is a .pt2 file (torch.export.save), not a checkpoint's .pt")
        check_output_not_input(out, {"the checkpoint": checkpoint})
        record = export_checkpoint(checkpoint, out)
    except (CheckpointError, ValueError, RuntimeError) as exc:
        return usage_error("export", message_of(exc))
    print(f"Wrote {out} and {out}.json ({record['task_type']}, {len(record['task_names'])} task(s), inputs "
          f"{', '.join(record['inputs'])}; largest difference from the checkpoint {record['max_difference']:.2g})")
    return 0
