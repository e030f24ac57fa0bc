"""The ``graphattn`` command line: one module per command."""
from graphattn.cli.main import build_parser, main

__all__ = ["main", "build_parser"]
