"""A SpecForge 0.2.0 run config (``specforge train -c run.yaml``) -> the SGLang capture server it starts.

SpecForge 0.2.0 runs the target model only inside SGLang capture servers: online training needs
``deployment.mode: disaggregated`` (config/schema.py:712-718). The servers are either external
(``deployment.disaggregated.server_urls``: their own command lines decide the kernels, so they are the input) or
started by ``specforge train`` itself (``deployment.disaggregated.managed_local.capture_servers``), with a command
rebuilt here from the facts in data/specforge.yaml (launch_plan.py:468-540). That command is then read like any
``--sglang-cmd``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile import schemas
from dgprecompile.data import load_yaml
from dgprecompile.documents import load_json_text, load_yaml_text
from dgprecompile.errors import InputError
from dgprecompile.fsutil import read_input


def facts() -> dict[str, Any]:
    return load_yaml("specforge.yaml")


@dataclass
class CaptureServer:
    port: int
    tp_size: int
    devices: list[str]
    argv: list[str]


@dataclass
class SpecForgeRun:
    path: str
    target_model_path: str
    max_length: int
    ep_size: int
    servers: list[CaptureServer] = field(default_factory=list)

    @property
    def tp(self) -> int:
        return self.servers[0].tp_size

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.path, "target_model_path": self.target_model_path, "max_length": self.max_length,
                "sglang_ep_size": self.ep_size,
                "capture_servers": [{"port": s.port, "tp_size": s.tp_size, "cuda_visible_devices": s.devices,
                                     "command": shlex.join(s.argv)} for s in self.servers]}


SPECFORGE_HINT = "fix the run config (SpecForge 0.2.0's form: examples/specforge-0.2/run.yaml)"


def _load(path: str) -> dict[str, Any]:
    """The run config, read with a cap and checked against the ``specforge-config`` schema (data/schemas/)."""
    text = read_input(path, "SpecForge config", hint="pass the run config `specforge train -c` reads")
    if Path(path).suffix in (".yaml", ".yml"):
        data = load_yaml_text(text, str(path), hint=SPECFORGE_HINT)
    else:
        data = load_json_text(text, str(path), hint=SPECFORGE_HINT)
    if not isinstance(data, dict):
        raise InputError(f"{path} is not a SpecForge run config (no mapping at the top)", hint=SPECFORGE_HINT)
    return schemas.check(data, "specforge-config", path, hint=SPECFORGE_HINT)


def suggested_server_command(target: str, ep: int, context: int) -> str:
    return (f"python -m sglang.launch_server --model-path {target} --tp-size N --ep-size {ep} "
            f"--chunked-prefill-size -1 --context-length {context} --enable-spec-capture")


def read_specforge_config(path: str) -> SpecForgeRun:
    data = _load(path)
    f = facts()
    model, dataset, training, deployment = (data.get(name) or {} for name in ("model", "data", "training", "deployment"))
    target = model.get("target_model_path")
    if not target:
        raise InputError(f"{path}: model.target_model_path is missing", hint="SpecForge needs it too (schema.py:38)")
    max_length, ep = dataset.get("max_length", 2048), model.get("sglang_ep_size", 1)
    context = model.get("sglang_context_length") or max_length + int(f["context_headroom"])
    # legacy keys (training.server_urls) move to deployment.disaggregated, as SpecForge does (schema.py:624-672)
    disagg = dict(deployment.get("disaggregated") or {})
    mode = deployment.get("mode")
    if training.get("server_urls"):
        disagg.setdefault("server_urls", training["server_urls"])
        mode = mode or "disaggregated"
    if dataset.get("hidden_states_path"):
        raise InputError(f"{path} is an offline run (data.hidden_states_path): it starts no SGLang server, so there "
                         "is nothing to precompile for it",
                         hint="plan the server that captured the hidden states (--sglang-cmd)")
    if mode != "disaggregated":
        raise InputError(f"{path}: SpecForge 0.2.0 refuses online training without deployment.mode: disaggregated "
                         "(\"colocated online training is no longer supported\", config/schema.py:712-718)",
                         hint="use a disaggregated config (examples/specforge-0.2/run.yaml), or the 2025 trainer "
                              "path: --specforge-cmd")
    urls = disagg.get("server_urls") or []
    managed = disagg.get("managed_local")
    if urls:
        raise InputError(f"{path} trains against external capture servers ({', '.join(map(str, urls))}): the "
                         "kernels are decided by those servers' own command lines, which this file does not hold",
                         hint=f'plan from the server\'s command: dgprecompile plan --sglang-cmd '
                              f'"{suggested_server_command(target, ep, context)}"')
    if not isinstance(managed, dict) or not managed.get("capture_servers"):
        raise InputError(f"{path}: deployment.disaggregated has neither server_urls nor managed_local.capture_servers",
                         hint="SpecForge needs one of them; managed_local lets `specforge train` start the server")
    servers = []
    for i, srv in enumerate(managed["capture_servers"]):
        devices = [str(d) for d in srv.get("cuda_visible_devices") or []]
        tp = srv.get("tp_size", 1)
        if devices and len(devices) != tp:
            raise InputError(f"{path}: capture server {i} has tp_size {tp} but {len(devices)} cuda_visible_devices "
                             "(SpecForge requires them equal, schema.py:330-333)")
        if ep > tp or tp % ep:
            raise InputError(f"{path}: model.sglang_ep_size {ep} must be no larger than and evenly divide the capture "
                             f"server tp_size {tp} (SpecForge refuses it, schema.py:872-884)",
                             hint="pick an sglang_ep_size that divides tp_size")
        port = srv.get("port", 30000 + i)
        servers.append(CaptureServer(port, tp, devices, capture_argv(model, training, srv, tp, port, context, f)))
    tps = sorted({s.tp_size for s in servers})
    if len(tps) > 1:
        raise InputError(f"{path}: the capture servers use different tp sizes ({', '.join(map(str, tps))}), so they "
                         "call different kernels; one plan covers one layout",
                         hint="plan each with --sglang-cmd (`dgprecompile plan --specforge-config` prints the "
                              "commands with --json), or give them one tp_size")
    return SpecForgeRun(path, str(target), max_length, ep, servers)


def capture_argv(model: dict[str, Any], training: dict[str, Any], server: dict[str, Any], tp: int, port: int,
                 context: int, f: dict[str, Any]) -> list[str]:
    """The capture server command `specforge train` runs (launch_plan.py:468-540), with `python` for
    sys.executable."""
    argv = ["python", "-m", f["server_module"], "--model-path", str(model["target_model_path"]),
            "--dtype", str(model.get("torch_dtype", "bfloat16"))]
    if model.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    if model.get("cache_dir"):
        argv += ["--download-dir", str(model["cache_dir"])]
    method = "dflash" if "dflash" in str(training.get("strategy", "eagle3")) else "eagle3"
    argv += ["--skip-tokenizer-init", "--tp-size", str(tp), "--chunked-prefill-size", "-1",
             "--enable-spec-capture", "--spec-capture-method", method]
    layers = model.get("aux_hidden_state_layer_ids")
    if layers:  # else SpecForge derives them from the draft config; they do not change any GEMM
        argv += ["--spec-capture-aux-layer-ids", *[str(x) for x in layers]]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    overrides = {"sglang_context_length": context,
                 "sglang_mem_fraction_static": server.get("mem_fraction_static")
                 or model.get("sglang_mem_fraction_static", f["sglang_fields"]["sglang_mem_fraction_static"]),
                 "sglang_attention_backend": server.get("attention_backend")
                 or model.get("sglang_attention_backend", f["sglang_fields"]["sglang_attention_backend"])}
    unknown = sorted(k for k in model if k.startswith("sglang_") and k not in f["sglang_fields"])
    if unknown:
        raise InputError(f"model.{unknown[0]} is not a SpecForge 0.2.0 field (its schema forbids unknown keys)",
                         hint="known sglang_* fields: " + ", ".join(f["sglang_fields"]))
    for name, default in f["sglang_fields"].items():
        value = overrides[name] if name in overrides else model.get(name, default)
        flag = "--" + name[len("sglang_"):].replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        elif value is not None:
            argv += [flag, str(value)]
    return argv
