"""Checkpoints of :func:`graphattn.train.fit`: atomic writes, safe loading, RNG state, resume checks.

Checkpoints hold only tensors and plain Python values, so they load with
``torch.load(weights_only=True)``; a file that would run code on loading is refused.
"""
from __future__ import annotations

import copy
import io
import json
import math
import os
import pickle
import platform
import random
import tempfile
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np
import torch
import torch_geometric

from graphattn.ops import extension
from graphattn.train import distributed
from graphattn.utils.files import plain_mode
from graphattn.version import __version__
from graphattn.utils.provenance import command_line, source_commit

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "check_meta", "write_metrics"]


class CheckpointError(RuntimeError):
    """A checkpoint is missing, corrupt, or not safe to load."""


def on_cpu(obj):
    """``obj`` with every tensor (in nested dicts / lists / tuples) moved to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):  # a shallow copy keeps the type (OrderedDict) and a state dict's _metadata
        out = copy.copy(obj)
        for k, v in obj.items():
            out[k] = on_cpu(v)
        return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple takes its fields positionally
        return type(obj)(*(on_cpu(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(on_cpu(v) for v in obj)
    return obj


def save_checkpoint(path, state: Dict[str, Any]) -> None:
    """``torch.save`` to a temporary file in the same folder, then an atomic rename. Tensors
    are saved on the CPU (a model trained on a GPU loads anywhere, also with a plain
    ``torch.load(path, weights_only=True)``)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise CheckpointError(f"cannot write the checkpoint {path}: {exc.strerror or exc}") from exc
    os.close(fd)
    try:
        torch.save(on_cpu(state), tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        plain_mode(tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as "unexpected pos ..."
        Path(tmp).unlink(missing_ok=True)
        raise CheckpointError(f"could not write the checkpoint {path} (disk full or read-only? the previous "
                              f"checkpoint, if any, is intact): {str(exc).splitlines()[0] if str(exc) else exc}"
                              ) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path, map_location="cpu") -> Dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``: a file that would run code is refused."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a folder; give the file inside it (e.g. {path / 'best.pt'})")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"PK" and magic[:1] != b"\x80":  # torch.save writes a zip file (older torch: a pickle)
        raise CheckpointError(f"{path} is not a graphattn checkpoint (not a file written by torch.save)")
    try:
        ck = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's own text goes on to advise weights_only=False: not for a file of unknown origin
        lines = str(exc).splitlines()
        why = next((ln.strip() for ln in lines if ln.strip().startswith("WeightsUnpickler error")),
                   lines[0] if lines else "")
        why = why.removeprefix("WeightsUnpickler error: ").split(". Please use")[0]
        raise CheckpointError(f"refusing to load {path}: it contains objects other than tensors and plain Python "
                              f"values (weights_only=True), or it is corrupt ({why}); load it with "
                              "weights_only=False only if you trust where it came from") from exc
    # a text, corrupt or other non-checkpoint file makes the unpickler fail in many ways (KeyError: 105,
    # AttributeError: 'str' object has no attribute 'dtype', ...)
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"{path} is not a readable graphattn checkpoint (truncated, corrupt or another "
                              f"kind of file?): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                              ) from exc
    if not isinstance(ck, dict):
        raise CheckpointError(f"{path} is not a graphattn checkpoint (it holds a {type(ck).__name__}, not a dict)")
    return ck


def check_meta(meta: Dict[str, Any]) -> None:
    """TypeError unless ``meta`` survives a ``torch.save`` / ``torch.load(weights_only=True)``
    round trip (plain dicts, lists, str, int, float, bool, None, tensors): found before
    training, not when the finished run's checkpoints refuse to load."""
    buf = io.BytesIO()
    try:
        torch.save(meta, buf)  # a lambda, a local class, an open file: not picklable at all
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise TypeError("meta must hold only plain Python values and tensors (it is stored in checkpoints): "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    buf.seek(0)
    try:
        torch.load(buf, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise TypeError("meta must hold only plain Python values and tensors (it is stored in checkpoints "
                        f"loaded with weights_only=True): {str(exc).splitlines()[0]}") from None


def rng_state() -> Dict[str, Any]:
    """Every random generator's state (torch CPU, CUDA when in use, Python, numpy) as tensors and
    plain values, as a checkpoint stores it."""
    np_state = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # dropout masks on GPUs
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore the generators from :func:`rng_state`'s record."""
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), *n[2:]))


#: meta entries that may change when a run is resumed (e.g. more epochs); all others must match
_RESUMABLE_META = ("hparams", "ensemble_size")  # an ensemble may grow on --resume
#: keys of a data spec that only say where the files are (data root moved, another machine)
_LOCATION_KEYS = ("root", "display")
#: paths of user files: location-only too when both specs record the files' ``sha256`` (the
#: contents are compared through it, so the same files moved elsewhere are the same run):
#: data files, the pretrain checkpoint of ``--init`` and the pretraining pool's files
_FILE_KEYS = ("csv", "edges", "target", "features", "tu_text", "checkpoint", "path")
#: meta entries compared through :func:`_comparable` (the others exactly)
_SPEC_META = ("data", "init", "pool")


def _comparable(old: Any, new: Any) -> Tuple[Any, Any]:
    """Both specs (data, ``--init`` record, pretraining pool) restricted to what both know: keys
    a later version added (absent from an older run's meta) and location-only keys are not
    compared; lists of the same length item by item."""
    if isinstance(old, dict) and isinstance(new, dict):
        skip = set(_LOCATION_KEYS) | (set(_FILE_KEYS) if old.get("sha256") and new.get("sha256") else set())
        keys = (set(old) & set(new)) - skip
        pairs = {k: _comparable(old[k], new[k]) for k in keys}
        return {k: a for k, (a, _) in pairs.items()}, {k: b for k, (_, b) in pairs.items()}
    text, rec = (old, new) if isinstance(old, str) else (new, old)
    if isinstance(text, str) and isinstance(rec, dict) and rec.get("sha256") and rec.get("path") \
            and Path(text).name == Path(rec["path"]).name:
        return None, None  # one file recorded by its path as given (older runs) and by contents: the same
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        pairs = [_comparable(a, b) for a, b in zip(old, new)]
        return [a for a, _ in pairs], [b for _, b in pairs]
    return old, new


def check_same_run(path: Path, old: Dict[str, Any], new: Dict[str, Any]) -> None:
    """CheckpointError when ``--resume`` would continue another run (other data, tasks, model...)."""
    keys = sorted((set(old) & set(new)) - set(_RESUMABLE_META))
    differ = []
    for k in keys:  # data specs gain keys across versions; the model and the tasks must match exactly
        a, b = _comparable(old[k], new[k]) if k in _SPEC_META else (old[k], new[k])
        if json.dumps(json_safe(a), sort_keys=True) != json.dumps(json_safe(b), sort_keys=True):
            scalar = all(v is None or isinstance(v, (str, int, float)) for v in (old[k], new[k]))
            differ.append(f"{k}: {old[k]!r} there, {new[k]!r} now" if scalar else k)  # name simple values
    if old and new and differ:
        raise CheckpointError(f"--resume: {path} belongs to another run (differing from this run's: "
                              f"{'; '.join(differ)}); choose another output folder or train without --resume")


def json_safe(obj):
    """NaN / inf -> None (strict JSON has no NaN), recursively; tensors and numpy scalars -> float."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, np.integer):
        return int(obj)
    try:
        val = float(obj)
    except (TypeError, ValueError):
        return str(obj)
    return val if math.isfinite(val) else None


def run_environment() -> Dict[str, Any]:
    """What a run's numbers depend on besides its options: the command line, the package's git commit
    (from a checkout), versions, torch CPU threads and the
    edge-attention route (the C++ kernel and the pure PyTorch path give the same outputs but draw
    dropout masks from different generators, so training runs differ)."""
    route = {"disabled": "disabled (GRAPHATTN_NO_CPP): pure PyTorch path",
             "failed": "failed to build: pure PyTorch path"}.get(extension.build_state(), extension.build_state())
    return {"command": command_line(), "git_commit": source_commit(),
            "graphattn": __version__, "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "python": platform.python_version(), "torch_threads": torch.get_num_threads(), "cpp_kernel": route,
            "cuda": torch.version.cuda if torch.cuda.is_available() else None}


def write_metrics(path, summary: Dict[str, Any], environment: bool = False) -> None:
    """``summary`` as strict JSON (NaN -> null, e.g. a metric of an empty split), written
    atomically (temporary file + rename) and, under ``torch.distributed``, by rank 0 only;
    ``environment``: add an ``environment`` block (:func:`run_environment`), as the CLI does."""
    if not distributed.is_main():
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if environment:
        summary = {**summary, "environment": summary.get("environment") or run_environment()}
    text = json.dumps(json_safe(summary), indent=2, allow_nan=False)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        plain_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
