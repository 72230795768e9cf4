"""This machine, as the stages meet it: its process table (procfs.py), the lifeline between dgprecompile and the
processes it starts (lifeline.py), scratch and staging directories held by a lock (scratch.py), and the compilers
and DeepGEMM installed here (toolchain.py). Part of the foundation: it imports only errors, fsutil and data."""
