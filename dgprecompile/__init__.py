"""dgprecompile: know every DeepGEMM kernel a model needs, compile it ahead of time, run with JIT off."""

__version__ = "0.1.0"
