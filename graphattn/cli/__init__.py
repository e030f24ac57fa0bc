"""The ``graphattn`` command line: :mod:`graphattn.cli.main` parses, one module per command runs."""
