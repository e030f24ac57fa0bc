"""``graphattn train --config FILE``: option values from a JSON file (``graphattn tune`` writes one), checked
as the command line checks them, under the flags actually given (no torch import)."""
from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path
from typing import Any, Dict

from graphattn.cli.arguments import train_option_parser

__all__ = ["read_config", "NOT_IN_CONFIG"]

#: destinations a config file may not set: the command itself, and where the run goes or comes from
NOT_IN_CONFIG = frozenset({"command", "config", "resume", "overwrite", "out"})


def _train_actions() -> Dict[str, argparse.Action]:
    # argparse has no public accessor of its options; the positional dataset name is not among them. Of two
    # options with one destination (--descriptors / --no-descriptors) the one that takes a value describes it
    actions: Dict[str, argparse.Action] = {}
    for a in train_option_parser()._option_string_actions.values():
        if a.dest != "help" and (a.dest not in actions or actions[a.dest].nargs == 0):
            actions[a.dest] = a
    return {"dataset": argparse.Action(["dataset"], "dataset"), **actions}


def _value(action: argparse.Action, key: str, value: Any, path: str) -> Any:
    """``value`` as the option ``action`` would parse it; ValueError naming the key otherwise."""
    def bad(what: str):
        return ValueError(f"--config {path}: {key}: expected {what}, got {value!r}")

    if value is None:
        return None
    if action.nargs == 0:  # a switch (store_true, --flag/--no-flag)
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if action.nargs in ("+", "*"):
        if not isinstance(value, list) or (action.nargs == "+" and not value):
            raise bad("a list")
        return [_value(argparse.Action(action.option_strings, action.dest, type=action.type, choices=action.choices),
                       key, v, path) for v in value]
    if isinstance(value, (list, dict)):
        raise bad("one value")
    if action.type is int and (isinstance(value, bool) or not isinstance(value, (int, str))):
        raise bad("an integer")
    if action.type is float and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
        raise bad("a number")
    if isinstance(value, bool):
        raise bad("a value (not true / false)")
    if isinstance(value, str) and action.type is not None or action.type is float:
        try:
            value = action.type(value)
        except (TypeError, ValueError):
            raise ValueError(f"--config {path}: {key}: invalid value {value!r}") from None
    if action.type is None and not isinstance(value, str):
        value = str(value)
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"--config {path}: {key}: {value!r} is not one of {list(action.choices)}")
    return value


def read_config(path: str) -> Dict[str, Any]:
    """The ``{destination: value}`` of the JSON object in ``path`` (keys may be written ``lr``, ``pe-kind`` or
    ``--pe-kind``); a ValueError naming the file and the key for an unknown option, a value outside its
    choices or of the wrong type."""
    try:
        values = json.loads(Path(path).expanduser().read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--config {path}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"--config {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(values, dict):
        raise ValueError(f"--config {path}: expected a JSON object of option values, got a {type(values).__name__}")
    actions, out = _train_actions(), {}
    for key, value in values.items():
        dest = str(key).lstrip("-").replace("-", "_")
        if dest not in actions or dest in NOT_IN_CONFIG:
            close = difflib.get_close_matches(dest, [d for d in actions if d not in NOT_IN_CONFIG], n=2)
            raise ValueError(f"--config {path}: {key!r} is not a graphattn train option that a config may set"
                             + (f" (did you mean {' or '.join(close)}?)" if close else ""))
        out[dest] = _value(actions[dest], key, value, path)
    return out
