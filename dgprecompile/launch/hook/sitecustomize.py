"""dgprecompile's startup hook (only active under `dgprecompile launch`, which puts this folder on PYTHONPATH).

Loads ``_dgprecompile_hook`` from this folder and installs its post-import hooks, then runs the
``sitecustomize`` that Python would have found without us, if any. Once installed, the hook writes this process's
"guard installed" record where the launcher reads it (DGPRECOMPILE_GUARD_DIR). Under strict mode a hook that
cannot be installed ends the process at once (exit 97) naming why: a strict job never runs unguarded. Without
strict mode it only warns: the hook then just traces.
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
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        if os.environ.get("DGPRECOMPILE_STRICT") == "1":  # strict: never run without the guard
            sys.stderr.write(f"dgprecompile strict mode: the guard could not be installed in this Python process "
                             f"({why}); stopping it (exit 97) rather than let it compile at run time\n")
            _record_failure(why)
            sys.stderr.flush()
            os._exit(97)
        sys.stderr.write(f"dgprecompile hook: not installed ({why})\n")


def _record_failure(why):
    guard = os.environ.get("DGPRECOMPILE_GUARD_DIR")
    if not guard:
        return
    try:
        with open(os.path.join(guard, f"failed-{os.getpid()}"), "w") as f:
            f.write(why)
    except OSError:
        pass


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
