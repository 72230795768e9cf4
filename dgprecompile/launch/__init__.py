"""Launching the unchanged job with runtime JIT off: environment, preflight, strict mode, the child-side hook."""
