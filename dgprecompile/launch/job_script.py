"""Before a job starts: the script a `python`/`torchrun` command runs must exist, or each of its ranks fails on its
own ("can't open file ...", then a torchrun traceback) after the cache check has passed. A SpecForge trainer
script that is not there means the command runs outside a SpecForge checkout."""

from __future__ import annotations

import os
import re

from dgprecompile.errors import EnvironmentProblem, InputError

_RUNNERS = re.compile(r"^(python[\d.]*|torchrun)$")
_NOT_A_SCRIPT = ("-m", "-c", "--module", "--no-python", "--no_python")  # python -m/-c; torchrun -m/--no-python


def job_script(argv: list[str]) -> str | None:
    """The .py file ``argv`` runs (python SCRIPT, torchrun ... SCRIPT), or None (a module, or another command)."""
    if not argv or not _RUNNERS.match(os.path.basename(argv[0])):
        return None
    for arg in argv[1:]:
        if arg in _NOT_A_SCRIPT or arg.startswith(("--module=", "--no-python=", "--no_python=")):
            return None
        if arg.endswith(".py") and not arg.startswith("-"):
            return arg
    return None


def require_job_script(argv: list[str], from_config: str | None, cwd: str | None = None) -> None:
    """Refuse (one error, a hint) a job whose script is not there; ``from_config`` is the --config file the
    command came from, if it did (then the hint names it)."""
    script = job_script(argv)
    if script is None or os.path.isfile(os.path.join(cwd or os.getcwd(), script)):
        return
    where = os.path.abspath(os.path.join(cwd or os.getcwd(), script))
    if "train_eagle3" in os.path.basename(script) or "--target-model-path" in argv:  # SpecForge's trainers
        other = ("or give --config a file whose `command:` is your trainer (make train CONFIG=your.yaml)"
                 if from_config else "or pass the trainer's path")
        raise EnvironmentProblem(f"the job's script {script} is not here ({where}): the command is SpecForge's "
                                 "trainer, which runs in a SpecForge checkout",
                                 hint=f"run it from the root of a SpecForge checkout (git clone "
                                      f"https://github.com/sgl-project/SpecForge), {other}")
    raise InputError(f"the job's script {script} does not exist ({where}); nothing was started",
                     hint=("fix `command:` in " + from_config) if from_config else
                     "check the path after `--` (it is relative to where launch runs)")
