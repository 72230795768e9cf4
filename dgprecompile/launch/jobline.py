"""The job's own command line: which command launch runs, and what it says about the plan.

The command after ``--``, else the config's ``command:``, else SpecForge's default trainer command; and, where no
option said so, the plan read from that command (an SGLang server command, `specforge train -c run.yaml`, or a
2025 SpecForge trainer command line).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from typing import Any

from dgprecompile.errors import InputError
from dgprecompile.planning.plan import PlanRequest

# The SpecForge command of the report (sgl-project/SpecForge#264): SpecForge 49452e22, sglang 0.5.1.
# --tp-size/--ep-size/--model-path come from sglang's ServerArgs, --batch-size from BenchArgs.
DEFAULT_TRAIN_COMMAND = (
    "torchrun --standalone --nproc_per_node 8 scripts/train_eagle3_sgl_online.py "
    "--target-model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 "
    "--model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 "
    "--draft-model-config configs/qwen3-coder-480B-A35B-instruct-eagle3.json "
    "--train-data-path cache/dataset/opc.jsonl --output-dir outputs/Qwen3-Coder-480B-A35B-Instruct-FP8 "
    "--tp-size 8 --ep-size 8 --batch-size 1 --max-length 2048 --num-epochs 10 --learning-rate 1e-4 "
    "--chat-template qwen --cache-dir ./cache"
)


def command_from_config(config: Mapping[str, Any]) -> list[str] | None:
    """The config's `command:` (a string, split as a shell would, or a list); None where it has none."""
    value = config.get("command")
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise InputError(f"train.yaml command: {exc}", hint="quote the command as one YAML string or a list") from None
    if isinstance(value, list) and all(isinstance(x, (str, int, float)) for x in value):
        return [str(x) for x in value]
    raise InputError("train.yaml `command` must be a string or a list of strings", hint="see train.yaml")


def resolve_command(argv: list[str], config: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """The job to run: the command line after ``--``, else the config's `command:`, else (a config without one)
    the default SpecForge command. Returns it and a note saying where it came from, if not the command line."""
    argv = list(argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if argv:
        return argv, None
    argv = command_from_config(config) or []
    if argv:
        return argv, None
    if config:
        return shlex.split(DEFAULT_TRAIN_COMMAND), "no `command:` in the config: using the default SpecForge command"
    raise InputError("no command to launch", hint="dgprecompile launch --manifest plan.yaml -- torchrun ...")


def looks_like_specforge(argv: list[str]) -> bool:
    """A 2025 SpecForge training command line (in-process SGLang), from which the plan's tp/ep/largest forward can
    be read. SGLang server commands are recognised before this (planning.server_cmd.find_server_command)."""
    return any("train_eagle3" in a for a in argv) or "--tp-size" in argv


def specforge_train_config(argv: list[str]) -> str | None:
    """The run config of `specforge train -c run.yaml` (SpecForge 0.2.0 cli.py:173), else None."""
    for i, arg in enumerate(argv[:-1]):
        if (arg == "specforge" or arg.endswith("/specforge")) and argv[i + 1] == "train":
            rest = argv[i + 2:]
            for j, a in enumerate(rest):
                if a in ("-c", "--config") and j + 1 < len(rest):
                    return rest[j + 1]
                if a.startswith("--config="):
                    return a.split("=", 1)[1]
    return None


def job_command(given: list[str], config: Mapping[str, Any], plan_request: PlanRequest) -> tuple[list[str], str | None]:
    """The job to run (resolve_command); with only --specforge-config, SpecForge 0.2.0's own trainer on it."""
    if not [a for a in given if a != "--"] and plan_request.specforge_config is not None:
        given = ["specforge", "train", "-c", plan_request.specforge_config]  # SpecForge 0.2.0 cli.py:173
    return resolve_command(given, config)


def request_for_job(plan_request: PlanRequest, argv: list[str], manifest: str | None) -> PlanRequest:
    """What the job's own command line says about the plan, where no option said it: an SGLang server command,
    `specforge train -c run.yaml`, or a 2025 SpecForge trainer command. launch turns SGLang's own precompile off."""
    from dgprecompile.planning.server_cmd import find_server_command

    undecided = (manifest is None and plan_request.specforge_cmd is None and plan_request.sglang_cmd is None
                 and plan_request.specforge_config is None)
    if undecided and plan_request.model is None and find_server_command(argv) is not None:
        plan_request = dataclasses.replace(plan_request, sglang_cmd=list(argv))  # the server itself
    elif undecided and plan_request.model is None and specforge_train_config(argv) is not None:
        plan_request = dataclasses.replace(plan_request, specforge_config=specforge_train_config(argv))
    elif undecided and plan_request.max_tokens is None and looks_like_specforge(argv):
        plan_request = dataclasses.replace(plan_request, specforge_cmd=shlex.join(argv))
    if plan_request.sglang_precompile is None:
        plan_request = dataclasses.replace(plan_request, sglang_precompile=False)
    return plan_request
