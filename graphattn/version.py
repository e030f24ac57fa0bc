"""The package version: ``graphattn.__version__``, and the ``graphattn`` entry of a run's recorded environment."""
__version__ = "0.1.0"
