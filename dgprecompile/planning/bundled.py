"""The repository's checked-in manifests (shapes/): regenerate them from shapes/index.yaml.

usage: python -m dgprecompile.planning.bundled SHAPES_DIR [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from dgprecompile.documents import load_yaml_text
from dgprecompile.fsutil import read_input
from dgprecompile.host.environ import environ
from dgprecompile.planning.manifest import dump_yaml, manifest_name
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS


def render_all(shapes_dir: Path) -> dict[str, str]:
    """file name -> manifest text, for every request in shapes_dir/index.yaml, each for a job in SGLang's default
    environment (whatever the environment of the regenerating shell: its grad mode is the default no_grad)."""
    with environ({INDUCTOR_GRAPHS.grad_variable: "0"}):
        return _render_all(shapes_dir)


def _render_all(shapes_dir: Path) -> dict[str, str]:
    path = shapes_dir / "index.yaml"
    index = load_yaml_text(read_input(path, "shapes index", hint="pass the repository's shapes/ directory"),
                           str(path), hint="fix shapes/index.yaml")
    out = {}
    for req in index["requests"]:
        plan = plan_from_request(PlanRequest(**{k: (str(v) if k == "sglang" else v) for k, v in req.items()}))
        data = plan.to_dict()
        data["model_source"] = data["model_source"].split(":", 1)[0] + ":" + Path(
            data["model_source"].split(":", 1)[-1]).name
        out[manifest_name(plan)] = dump_yaml(data)
    return out


def main(argv: list[str]) -> int:
    shapes_dir = Path(argv[0])
    check = "--check" in argv
    stale = []
    for name, text in render_all(shapes_dir).items():
        path = shapes_dir / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(name)
        if not check:
            path.write_text(text)
    verb = "differ" if check else "rewritten"
    print(f"{len(stale)} manifests {verb}" + (": " + ", ".join(stale) if stale else ""))
    return 1 if (check and stale) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
