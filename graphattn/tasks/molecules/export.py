"""A molecule checkpoint as a deployable ``torch.export`` program (``graphattn export``).

    record = export_checkpoint("runs/tox21/best.pt", "tox21.pt2")   # tox21.pt2 + tox21.pt2.json
    model = load_exported("tox21.pt2")                              # torch.export.load and the record
    model.predict(["CCO", "c1ccccc1O"]).values                       # = graphattn.load(...).predict(...)

The program holds the trained network with a graph-size-independent signature: one dict of tensors
(:data:`INPUT_KEYS`: atoms, bonds, the batch vector, the graph pointer ``ptr`` and, as the checkpoint
needs them, its PE and descriptors), of any number of atoms and bonds and of two or more molecules
(``torch.export`` fixes batches of one to a separate trace; :class:`ExportedMoleculeModel` gives a lone
molecule twice). It returns what
``predict`` returns: per-task probabilities (classification) or values in the targets' units
(regression), ``(B, T)``, every member's ``(members, B, T)`` for an ensemble. Featurisation (RDKit,
the PE, the descriptors) stays in Python: the JSON record beside the program names its options,
and :func:`program_inputs` turns SMILES into the program's inputs with them.

Not exportable: social-network checkpoints (their models read whole graphs through neighbour
sampling and label inputs, which is not one tensor signature) and ``torch.jit`` (the layers use
keyword-only and ``Optional`` arguments TorchScript cannot parse)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

import numpy as np
import torch
from torch import Tensor, nn
from torch.export import Dim
from torch_geometric.data import Batch

from graphattn.tasks.molecules.checkpoints import load_model, task_type_of
from graphattn.tasks.molecules.data import featurize, graph_options
from graphattn.tasks.molecules.outputs import call_outputs, model_inputs
from graphattn.tasks.trained import Predictions

__all__ = ["INPUT_KEYS", "MoleculeProgram", "ExportedMoleculeModel", "export_checkpoint", "load_exported",
           "program_inputs", "EXAMPLE_SMILES"]

#: the program's input keys, in the model's call order; a checkpoint's program takes the ones its
#: featurisation gives (the record's ``"inputs"``)
INPUT_KEYS = ("x", "edge_index", "batch", "edge_attr", "ptr", "pe", "pe_eigvals", "pe_mask", "edge_pe",
              "graph_features")
#: the dimension each input is dynamic in: atoms (N), bonds (E), molecules (B; ``ptr`` has B + 1)
_DYNAMIC = {"x": (0, "N"), "batch": (0, "N"), "pe": (0, "N"), "pe_eigvals": (0, "N"), "pe_mask": (0, "N"),
            "edge_index": (1, "E"), "edge_attr": (0, "E"), "edge_pe": (0, "E"), "graph_features": (0, "B"),
            "ptr": (0, "B1")}
#: the molecules traced for the export and compared with the checkpoint's own predictions after it
EXAMPLE_SMILES = ("CC(=O)Nc1ccc(O)cc1", "c1ccc2ccccc2c1", "OCC(O)CO", "CCN(CC)CCOC(=O)c1ccc(N)cc1")
#: the largest difference allowed between the program's and the checkpoint's outputs
TOLERANCE = 1e-5


class MoleculeProgram(nn.Module):
    """A molecule model behind one dict of tensors (:data:`INPUT_KEYS`), giving float64 probabilities
    or values as ``predict`` does: the module :func:`export_checkpoint` exports."""

    def __init__(self, model: nn.Module, task_type: str):
        super().__init__()
        self.model, self.task_type = model.eval(), task_type

    def forward(self, inputs: Dict[str, Tensor]) -> Tensor:
        args = tuple(inputs[k] for k in INPUT_KEYS[:4])
        kwargs = {k: inputs.get(k) for k in ("pe", "pe_eigvals", "pe_mask")}
        kwargs.update({k: inputs[k] for k in ("edge_pe", "graph_features") if k in inputs})
        return call_outputs(self.model, args, {**kwargs, "num_graphs": inputs["ptr"].size(0) - 1}, self.task_type)


def program_inputs(graphs: Sequence) -> Dict[str, Tensor]:
    """The program's inputs for featurised molecule graphs (:func:`~graphattn.tasks.molecules.data.featurize`
    with the record's options): one batch, the tensors that are present."""
    batch = Batch.from_data_list(list(graphs))
    args, kwargs = model_inputs(batch)
    out = dict(zip(INPUT_KEYS[:4], args))
    out["ptr"] = batch.ptr
    out.update({k: v for k, v in kwargs.items() if k != "num_graphs" and v is not None})
    return {k: out[k] for k in INPUT_KEYS if out.get(k) is not None}


def _dynamic_shapes(inputs: Dict[str, Tensor]) -> Dict[str, Any]:
    n, e, b = Dim("atoms", min=1), Dim("bonds", min=0), Dim("molecules", min=1)
    dims = {"N": n, "E": e, "B": b, "B1": b + 1}
    return {"inputs": {k: {_DYNAMIC[k][0]: dims[_DYNAMIC[k][1]]} for k in inputs}}


def _graphs(smiles: Sequence[str], meta: Dict[str, Any]) -> List:
    graphs = featurize(list(smiles), **graph_options(meta))
    bad = [f"{s!r}: {g}" for s, g in zip(smiles, graphs) if isinstance(g, str)]
    if bad:
        raise ValueError(f"cannot featurise {'; '.join(bad)}")
    return graphs


def export_checkpoint(checkpoint: Union[str, Path], out: Union[str, Path],
                      example_smiles: Sequence[str] = EXAMPLE_SMILES) -> Dict[str, Any]:
    """Export the molecule ``checkpoint`` to ``out`` (a ``torch.export`` ``.pt2`` file) and its record
    to ``out`` + ``.json`` (the featurisation options, the inputs, the tasks); returns the record.

    The program is traced on ``example_smiles`` with the atom, bond and molecule counts dynamic, then
    run on other molecules (one with a single atom and no bond among them) and compared with the
    checkpoint's own outputs: ``RuntimeError`` if they differ by more than :data:`TOLERANCE`, and no
    file is written. ``ValueError`` for a checkpoint that is not a molecule one."""
    model, meta = load_model(checkpoint)
    task_type = task_type_of(meta)
    program = MoleculeProgram(model, task_type)
    inputs = program_inputs(_graphs(example_smiles, meta))
    with torch.no_grad():
        exported = torch.export.export(program, (inputs,), dynamic_shapes=_dynamic_shapes(inputs))
        check = program_inputs(_graphs(["C", "CCO", "O=C(O)c1ccccc1OC(C)=O"], meta))
        gap = (exported.module()(check) - program(check)).abs().max().item()
    if not gap <= TOLERANCE:
        raise RuntimeError(f"the exported program differs from the checkpoint by {gap:.3g} (> {TOLERANCE}); "
                           "nothing was written")
    record = {"format": "graphattn-molecule-program", "version": 1, "checkpoint": str(checkpoint),
              "task_type": task_type, "task_names": list(meta["task_names"]), "inputs": list(inputs),
              "ensemble": meta.get("ensemble"), "featurizer_version": meta.get("featurizer_version"),
              "featurize": graph_options(meta), "max_difference": gap}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(exported, str(out))
    Path(f"{out}.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


@dataclass
class ExportedMoleculeModel:
    """An exported program and its record (:func:`load_exported`), predicting from SMILES."""

    program: nn.Module
    record: Dict[str, Any]

    def predict(self, smiles: Union[str, Sequence[str]]):
        """:class:`~graphattn.tasks.trained.Predictions`-shaped output of the program: every input a row,
        NaN and its error for one RDKit cannot parse."""
        smiles = [smiles] if isinstance(smiles, str) else [str(s) for s in smiles]
        graphs = featurize(smiles, **self.record["featurize"])
        errors = [g if isinstance(g, str) else "" for g in graphs]
        rows = [i for i, g in enumerate(graphs) if not isinstance(g, str)]
        t = len(self.record["task_names"])
        ensemble = bool(self.record.get("ensemble"))
        values = np.full((len(smiles), t), np.nan)
        std = np.full((len(smiles), t), np.nan) if ensemble else None
        if rows:
            given = [graphs[i] for i in rows]
            with torch.no_grad():  # the program is traced for batches of >= 2 molecules: one is given twice
                out = self.program(program_inputs(given * 2 if len(given) == 1 else given))[..., :len(given), :].numpy()
            if ensemble:
                values[rows], std[rows] = out.mean(0), out.std(0)
            else:
                values[rows] = out
        return Predictions(smiles, values, std, errors, list(self.record["task_names"]), self.record["task_type"])


def load_exported(path: Union[str, Path]) -> ExportedMoleculeModel:
    """``torch.export.load(path)`` and the record beside it, ready to predict from SMILES."""
    path = Path(path)
    record_path = Path(f"{path}.json")
    if not record_path.exists():
        raise FileNotFoundError(f"{record_path} (the featurisation record written beside {path.name}) is missing")
    record = json.loads(record_path.read_text())
    if record.get("format") != "graphattn-molecule-program":
        raise ValueError(f"{record_path} is not a graphattn molecule program record")
    return ExportedMoleculeModel(torch.export.load(str(path)).module(), record)

