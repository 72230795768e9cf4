"""Find and read a model's config.json: a bundled name or alias, a file, a directory, or a Hugging Face
repo id that is already in the local Hugging Face cache (never downloaded)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dgprecompile import schemas
from dgprecompile.documents import load_json_text
from dgprecompile.errors import InputError
from dgprecompile.fsutil import read_input


@dataclass(frozen=True)
class ModelConfig:
    name: str  # a short display name
    source: str  # where the config came from: "bundled:<file>", a path, or "hf-cache:<repo>@<rev>"
    config: dict[str, Any] = field(repr=False)


def _bundled_index() -> list[dict[str, Any]]:
    text = resources.files("dgprecompile.data.models").joinpath("aliases.yaml").read_text()
    return yaml.safe_load(text)["models"]


def bundled_names() -> list[str]:
    return [entry["name"] for entry in _bundled_index()]


MODEL_HINT = "pass the model's config.json as downloaded (--model PATH)"
CONFIG_MAX_BYTES = 4 << 20  # a config.json is a few KiB (the bundled ones under 16 KiB)


def _read_json(path: Path, source: str, name: str) -> ModelConfig:
    text = read_input(path, "config file", hint="pass an existing config.json or model directory",
                      limit=CONFIG_MAX_BYTES)
    data = load_json_text(text, str(path), hint=MODEL_HINT)
    if not isinstance(data, dict):
        raise InputError(f"{path} does not hold a JSON object, so it is not a config.json", hint=MODEL_HINT)
    schemas.check(data, "model-config", str(path), hint=MODEL_HINT)
    return ModelConfig(name=name, source=source, config=data)


def hf_cache_root() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def _from_hf_cache(repo_id: str) -> ModelConfig | None:
    repo_dir = hf_cache_root() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates: list[Path] = []
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        candidates.append(snapshots / ref.read_text().strip())
    candidates += sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for snap in candidates:
        cfg = snap / "config.json"
        if cfg.is_file():
            return _read_json(cfg, f"hf-cache:{repo_id}@{snap.name}", repo_id.split("/")[-1])
    return None


def load_model(spec: str) -> ModelConfig:
    """Resolve ``spec`` to a config, in this order: bundled name/alias/repo id, path to a file,
    model directory, Hugging Face repo id in the local cache."""
    if not spec:
        raise InputError("no model given", hint="pass --model NAME, a config.json path or a model directory")
    wanted = spec.casefold()
    for entry in _bundled_index():
        names = [entry["name"], entry["repo"], *entry.get("aliases", [])]
        if wanted in (n.casefold() for n in names):
            path = resources.files("dgprecompile.data.models").joinpath(entry["file"])
            return _read_json(Path(str(path)), f"bundled:{entry['file']}", entry["name"])
    path = Path(spec).expanduser()
    if path.exists() and not path.is_dir():  # a file (a device, a pipe: refused by read_input before any read)
        return _read_json(path, str(path), path.parent.name if path.name == "config.json" else path.stem)
    if path.is_dir():
        if os.path.lexists(path / "config.json"):  # not a regular file: read_input says what it is
            return _read_json(path / "config.json", str(path / "config.json"), path.name)
        raise InputError(f"{path} is a directory without a config.json",
                         hint="pass the checkpoint directory that holds config.json, or the file itself")
    if spec.endswith((".json", "/")) or spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        # a path, not a name: say that it is not there rather than that no model has this name
        raise InputError(f"model path {spec} does not exist (no such file or directory)",
                         hint="pass an existing config.json or model directory, or a bundled name: "
                              + ", ".join(bundled_names()))
    if spec.count("/") == 1:
        found = _from_hf_cache(spec)
        if found is not None:
            return found
        raise InputError(
            f"model {spec!r} is neither bundled nor in the local Hugging Face cache ({hf_cache_root()})",
            hint="download its config.json (e.g. `huggingface-cli download REPO config.json`) or pass its path",
        )
    raise InputError(
        f"unknown model {spec!r}",
        hint="bundled models: " + ", ".join(bundled_names()) + "; or pass a config.json path or model directory",
    )
