"""Compiling: warm's parent (scheduling, progress), its worker processes and the per-generation backends."""
