"""Recipes: plain values in, results out: :mod:`graphattn.tasks.molecules` and :mod:`graphattn.tasks.social`."""
