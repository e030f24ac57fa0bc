"""Molecule property prediction: datasets to models to metrics, pretraining and fine-tuning."""
