"""dgprecompile's startup hook (only active under `dgprecompile launch`, which puts this folder on PYTHONPATH).

Loads ``_dgprecompile_hook`` from this folder and installs its post-import hooks, then runs the
``sitecustomize`` that Python would have found without us, if any. It never raises: a broken hook must not
stop the trainer.
"""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _install():
    try:
        spec = importlib.util.spec_from_file_location("_dgprecompile_hook", os.path.join(_here, "_dgprecompile_hook.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["_dgprecompile_hook"] = module
        spec.loader.exec_module(module)
        module.install()
    except Exception as exc:  # never break the trainer's start
        sys.stderr.write(f"dgprecompile hook: not installed ({type(exc).__name__}: {exc})\n")


def _chain():
    """Run the next sitecustomize on sys.path (ours shadows it)."""
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write(f"dgprecompile hook: the chained sitecustomize failed ({type(exc).__name__}: {exc})\n")


_install()
_chain()
