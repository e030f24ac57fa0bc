"""Facts about a tensor's contents, remembered for that tensor while it lives unchanged.

Reading a tensor's values (an index range, a graph count, distinct rows) makes the host wait for
the device. Such facts about a graph's tensors (``edge_index``, ``batch``, categorical codes) are
the same on every call that passes the same tensor, so they are read once and remembered here,
keyed as the CSR view of :mod:`graphattn.ops.csr` is: identity, data pointer, in-place version
counter, shape and device of every tensor the fact depends on. An in-place edit changes the
version (a miss); a freed tensor drops its entries. Writes that bypass the version counter
(``t.data[...] = ...``, edits through ``.numpy()``) are not seen: :func:`forget_all` then.

Nothing is remembered under ``torch.compile`` (the lookup would guard the compiled frame on the
tensor objects) or for inference tensors (no version counter); a value holding tensors that was
computed under ``torch.inference_mode`` is found only under inference mode (a later training call
could not save its tensors for backward).
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Hashable, Optional

import torch
from torch import Tensor

__all__ = ["recall", "remember", "forget_all", "MEMO_SIZE"]

#: Facts kept at most (least recently used go first).
MEMO_SIZE = 128

_MEMO: "OrderedDict[tuple, tuple]" = OrderedDict()
_INFERENCE = "made under inference mode"


def _key(tag: Hashable, tensors) -> Optional[tuple]:
    if torch.compiler.is_compiling():
        return None
    parts = []
    for t in tensors:
        if t is None:
            parts.append(None)
        elif t.is_inference() or t.layout != torch.strided:
            return None
        else:
            parts.append((id(t), t.data_ptr(), t._version, tuple(t.shape), str(t.device)))
    return (tag, *parts)


def recall(tag: Hashable, *tensors: Optional[Tensor], default: Any = None) -> Any:
    """The value remembered under ``tag`` for exactly these tensors (same objects, unchanged
    since; ``None`` entries stand for an absent optional tensor), else ``default``. Under
    ``torch.inference_mode`` values remembered there are found too (outside it, never)."""
    if torch.compiler.is_compiling():
        return default
    tags = (tag, (_INFERENCE, tag)) if torch.is_inference_mode_enabled() else (tag,)
    for key in (_key(t, tensors) for t in tags):
        hit = _MEMO.get(key) if key is not None else None
        if hit is not None and all(ref() is t for ref, t in zip(hit[0], tensors) if ref is not None):
            if _versions(hit[1]) != hit[2]:  # a remembered tensor was edited in place since
                del _MEMO[key]
                continue
            _MEMO.move_to_end(key)
            return hit[1]
    return default


def _tensors_in(value) -> list:
    """The tensors ``value`` is or holds (in a tuple / list, or as attributes of an object)."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    return [v for v in getattr(value, "__dict__", {}).values() if isinstance(v, Tensor)]


def _versions(value) -> tuple:
    """In-place version counters of the tensors a remembered value holds (handed out to callers,
    who may edit them: an edited one is not handed out again)."""
    return tuple(t._version for t in _tensors_in(value) if not t.is_inference())


def remember(tag: Hashable, value: Any, *tensors: Optional[Tensor]) -> Any:
    """Remember ``value`` under ``tag`` for these tensors (see :func:`recall`) and return it. A
    value holding tensors made under ``torch.inference_mode`` is found only there: a training
    call could not save those tensors for backward."""
    if torch.compiler.is_compiling():
        return value
    if torch.is_inference_mode_enabled() and _tensors_in(value):
        tag = (_INFERENCE, tag)
    key = _key(tag, tensors)
    held = _tensors_in(value)
    if key is None or any(h is t for h in held for t in tensors):  # (it would keep its key alive)
        return value
    try:  # the entry goes when any of its tensors is freed
        refs = tuple(None if t is None else weakref.ref(t, lambda _r, key=key, memo=_MEMO: memo.pop(key, None))
                     for t in tensors)  # (memo bound here: at exit the module's globals may be gone)
    except TypeError:  # pragma: no cover - tensors are weak-referenceable
        return value
    _MEMO[key] = (refs, value, _versions(value))
    _MEMO.move_to_end(key)
    while len(_MEMO) > MEMO_SIZE:
        _MEMO.popitem(last=False)
    return value


def forget_all() -> None:
    """Forget everything remembered (after writes that bypass the version counter)."""
    _MEMO.clear()
