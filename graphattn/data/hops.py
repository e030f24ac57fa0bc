"""Deprecated home of :class:`~graphattn.transforms.AddHopEdges` and :func:`~graphattn.transforms.hop_edges`
(moved to :mod:`graphattn.transforms.hops`); the names still resolve here, with a warning."""


def __getattr__(name: str):
    if name not in ("AddHopEdges", "hop_edges"):
        raise AttributeError(f"module 'graphattn.data.hops' has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(f"graphattn.data.hops.{name} moved to graphattn.transforms.{name}", DeprecationWarning,
                  stacklevel=2)
    # by name, at first use: graphattn.transforms sits above graphattn.data
    value = globals()[name] = getattr(importlib.import_module("graphattn.transforms.hops"), name)  # warned once
    return value
