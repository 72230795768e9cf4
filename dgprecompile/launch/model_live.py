"""`verify --live --live-server CMD`: the independent live proof, run from the CLI.

The plan is what it checks, so nothing of the check comes from the plan: the server command (given again by the
user, as the job will run it) and the model's config.json (resolved from the command's --model-path as `plan`
resolves it: a bundled name, a file, a model folder, the Hugging Face cache) go to
``python -m dgprecompile.launch.model_driver`` (SGLang's own model for one rank, every m), which runs as the job of
a strict ``dgprecompile launch`` of the plan's cache, in a child process (this module imports neither torch nor
sglang). The report: the launch's exit code and refusals, the driver's per-module calls and failures, files the
run added to the cache's JIT folders and torch.compile frames; exit 1 on any of them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.errors import InputError
from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.models import load_model
from dgprecompile.planning.plan import Plan


@dataclass
class ModelLiveReport:
    server: str
    launch_exit: int
    driver: dict[str, Any] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def environment_error(self) -> bool:
        """The driver never reported: no GPU, no sglang, a model SGLang cannot build here."""
        return not self.driver and not self.refusals

    @property
    def ok(self) -> bool:
        d = self.driver
        return (self.launch_exit == 0 and not self.refusals and bool(d.get("calls")) and not d.get("failed")
                and not d.get("new_cache_files") and not d.get("dynamo", {}).get("compiled"))

    @property
    def return_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        return {"server": self.server, "launch_exit": self.launch_exit, "ok": self.ok, "refusals": self.refusals,
                "driver": self.driver}


def model_folder(server: str, into: Path) -> Path:
    """A folder holding the config.json of the command's --model-path, resolved as `plan` resolves a model."""
    words = shlex.split(server)
    spec = next((w.split("=", 1)[1] for w in words if w.startswith("--model-path=")), None)
    if spec is None and "--model-path" in words[:-1]:
        spec = words[words.index("--model-path") + 1]
    if not spec:
        raise InputError("--live-server has no --model-path", hint="pass the server command the job runs, "
                         "e.g. --live-server \"python -m sglang.launch_server --model-path M --tp 8\"")
    into.mkdir(parents=True, exist_ok=True)
    (into / "config.json").write_text(json.dumps(load_model(spec).config))
    return into


def run_model_live(plan: Plan, store: CacheStore, server: str, ms: str, log: str | None = None) -> ModelLiveReport:
    with tempfile.TemporaryDirectory(prefix="dgprecompile-live-") as tmp:
        work = Path(tmp)
        folder = model_folder(server, work / "model")
        write_manifest(plan, work / "plan.yaml")
        report_path = work / "driver.json"
        argv = [sys.executable, "-m", "dgprecompile", "launch", "--manifest", str(work / "plan.yaml"), "--cache-dir",
                str(store.root), "--", sys.executable, "-m", "dgprecompile.launch.model_driver", "--sglang-cmd",
                server, "--model-dir", str(folder), "--m", ms, "--report", str(report_path)]
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if log:
            Path(log).write_text(res.stdout + res.stderr)
        driver = json.loads(report_path.read_text()) if report_path.is_file() else {}
    refusals = [line for line in res.stderr.splitlines() if line.startswith("dgprecompile strict mode:")]
    return ModelLiveReport(server, res.returncode, driver, refusals, res.stderr[-4000:])
