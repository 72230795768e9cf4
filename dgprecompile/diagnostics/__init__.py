"""Diagnostics: doctor (will the runtime precompile fail here?), the task-limit readers, and repro."""
