"""The user files a social ``graphattn train`` run reads, and the check that they are unchanged
when the run's model is evaluated or its training resumed (``spec.sha256``)."""
from __future__ import annotations

import warnings
from pathlib import Path

from graphattn.data.download import files_sha256
from graphattn.data.tu_folder import TU_FILE, find_tu_prefix

__all__ = ["input_files", "warn_if_inputs_changed"]


def input_files(spec) -> list:
    """The user files a ``graphattn train`` data spec (:mod:`graphattn.tasks.social.specs`) reads
    (``--edges/--target/--features``, ``--tu-text`` — for the TU original format every ``NAME_*`` file
    of its set)."""
    if spec.tu_text:
        tu = find_tu_prefix(spec.tu_text)
        if tu is None:
            return [spec.tu_text]
        # the set's own files only (NAME_A.txt, NAME_graph_labels.txt, ...): not NAME_full_A.txt of another set
        return sorted(p for p in Path(tu[0]).glob(f"{tu[1]}_*") if p.is_file()
                      and (m := TU_FILE.match(p.name)) is not None and m.group("prefix") == tu[1])
    return [spec.edges, spec.target, spec.features]


def warn_if_inputs_changed(spec) -> None:
    """Warn when the user files of a recorded data spec (``spec.sha256``) changed since
    training: the split and the metrics then come from the new contents."""
    want = spec.sha256
    if not want:
        return
    files = [p for p in input_files(spec) if p is not None]
    got = files_sha256(files)
    if got is not None and got != want:
        warnings.warn(f"{', '.join(str(p) for p in files)}: changed since this model was trained (sha256 "
                      "differs): the split and the metrics are rebuilt from the new contents", stacklevel=3)
