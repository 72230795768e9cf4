"""The asks record (data/schemas/proof-asks.json) of a DeepGEMM generation sweep, from its committed files.

A sweep (tests/gpu/sweep_generations.py) calls each release's GEMMs itself, SGLang's calling conventions over fixed
Qwen3-Coder-480B keys and m (not from any plan), first on an empty cache per key: its `cold/key*.json` list every
entry the library created and at which m, so every name the runtime looked up. Those names, with the include path
the run gave DeepGEMM (the release's site, part of each name) and the `plan` options its warm was given, are the
record tests/test_proof_asks.py holds HEAD's plan to on this machine. The warm and the sweep after it are left out:
they are what the plan under test built and swept.

    python tests/gpu/sweep_asks.py RECORD_DIR     # RECORD_DIR/record.json names the results folder and release

writes RECORD_DIR/asks.json and RECORD_DIR/config.json (the bundled config the sweep's plan read, at the record's
commit).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAN_OPTIONS = ("tp", "ep", "moe_runner_backend", "max_tokens")


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    handle = tar.extractfile(tar.getmember(name))
    assert handle is not None, name
    return handle.read()


def cold_names(tar: tarfile.TarFile, release: str) -> list[str]:
    """Every entry the cold sweep of ``release`` created, each key on its own empty cache."""
    names: set[str] = set()
    for member in tar.getmembers():
        if re.fullmatch(rf"(\./)?{re.escape(release)}/cold/key\d+\.json", member.name):
            for key in json.loads(_member(tar, member.name))["keys"]:
                for _m, created, *_ in key["new_entries"]:
                    names.update(created)
    return sorted(names)


def make_asks(record_dir: Path) -> dict:
    record = json.loads((record_dir / "record.json").read_text())
    release = record["versions"]["sgl-deep-gemm"]
    results = (record_dir / record["files"].split(" ")[0] / "results.tar.gz").resolve()
    with tarfile.open(results) as tar:
        prefix = "./" if any(m.name.startswith("./") for m in tar.getmembers()) else ""
        version = json.loads(_member(tar, f"{prefix}{release}/version.json"))
        plan = json.loads(_member(tar, f"{prefix}{release}/plan.json"))
        names = cold_names(tar, release)
    assert names and version["sglang"] == record["sglang"], (release, version["sglang"])
    gpu = re.search(r"host: [^;]*; ([^,]+),", record["machine"]).group(1)
    model_file = plan["model_source"].removeprefix("bundled:")
    config = subprocess.run(["git", "show", f"{record['commit']}:dgprecompile/data/models/{model_file}"],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout
    (record_dir / "config.json").write_text(config)
    versions = {k: v.removesuffix(" (carried)").split("+")[0] for k, v in record["versions"].items()}
    return {
        "format": "dgprecompile-proof-asks", "schema": 1, "name": record["name"], "commit": record["commit"],
        "date": record["date"], "command": record["command"], "device_s": None, "complete": True,
        "how": (f"tests/gpu/sweep_asks.py: every entry sgl-deep-gemm {release}'s own runtime created in the cold "
                f"sweep ({results.parent.name}/results.tar.gz {release}/cold/key*.json), SGLang's calling conventions "
                "over fixed Qwen3-Coder-480B keys and m, each key on an empty cache: every name it looked up"),
        "plan_request": {k: plan[k] for k in PLAN_OPTIONS if plan.get(k) is not None},
        "config": "config.json", "sglang": record["sglang"],
        "environment": {"gpu": gpu, "deepgemm_include": f"{version['site']}/deep_gemm/include",
                        "versions": versions},
        "families": {"deepgemm": {"entries": names}},
    }


def main(argv: list[str]) -> int:
    for arg in argv:
        record_dir = Path(arg)
        asks = make_asks(record_dir)
        (record_dir / "asks.json").write_text(json.dumps(asks, indent=1) + "\n")
        print(f"{record_dir}/asks.json: {len(asks['families']['deepgemm']['entries'])} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
