"""A STAND-IN for the `sglang` package (tests only): just enough for `python -m sglang.launch_server` to run."""
