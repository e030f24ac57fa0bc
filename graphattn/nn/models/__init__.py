"""Models built from :mod:`graphattn.nn` layers: graph/node classifiers, ensembles, baselines."""
