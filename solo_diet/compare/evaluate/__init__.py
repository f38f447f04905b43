"""Evaluation: a checkpoint in, its metrics and its learning-curve points out."""
