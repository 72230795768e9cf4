"""Turn the unpacked results of tests/gpu/sweep_generations.sh into the compact record committed under tests/data/
(one file for all releases): per release and key, the runs of sampled m with one printed configuration, the
entries that appeared at which m, the warm index (kernel id -> the entry name the library itself made), the
sweep-after-warm counts, the calling-convention probe, and every entry's kernel.cu as sha256 (one full text per
kernel family as a sample).

usage: python tests/gpu/summarize_generations.py [--slim] OUT.json RUN_NAME RESULTS_DIR "<provenance text>" [RUN_NAME DIR TEXT ...]
--slim leaves out each entry's meta.json and the kernel.cu samples (the sha256 of every kernel.cu stays).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

GEMM_TYPE = {"GEMM_NT_F8F8BF16": "dense", "GROUPED_GEMM_NT_F8F8BF16_MASKED": "masked",
             "GROUPED_GEMM_NT_F8F8BF16_CONTIG": "contig"}


def _load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def release(vdir: str, slim: bool = False) -> dict:
    version = _load(os.path.join(vdir, "version.json")) or {}
    out: dict = {"dg_version": version.get("dg_version"), "sglang": version.get("sglang"), "site": version.get("site"),
                 "keys": {}, "info": None, "problems": []}
    cold = os.path.join(vdir, "cold")
    parts = sorted((f for f in os.listdir(cold) if f.endswith(".json")), key=lambda f: int(f[3:-5])) \
        if os.path.isdir(cold) else []
    for fname in parts:
        rec = _load(os.path.join(cold, fname)) or {}
        if "import_error" in rec:
            out["problems"].append(f"{fname}: import: {rec['import_error'][:300]}")
        out["info"] = out["info"] or rec.get("info")
        for key in rec.get("keys", []):
            name = f"{GEMM_TYPE[key['kind']]}/{key['n']}/{key['k']}/{key['num_groups']}"
            slot = out["keys"].setdefault(name, {"runs": [], "new_entries": [], "calls": 0, "errors": [],
                                                 "truncated_at": [], "parts": []})
            slot["parts"].append([key["m_first"], key["m_last"]])
            slot["runs"] += key.get("runs", [])
            slot["new_entries"] += [e[:2] for e in key["new_entries"]]
            slot["calls"] += key["calls"]
            slot["errors"] += key["errors"][:3]
            if key["truncated_at"]:
                slot["truncated_at"].append(key["truncated_at"])
    for slot in out["keys"].values():
        slot["runs"].sort()
    entries_dir = os.path.join(vdir, "entries")
    out["entries"], sample, seen_family = {}, {}, set()
    for name in sorted(os.listdir(entries_dir)) if os.path.isdir(entries_dir) else []:
        path = os.path.join(entries_dir, name)
        files = open(os.path.join(path, "files.txt")).read().split() if os.path.isfile(
            os.path.join(path, "files.txt")) else []
        cu = os.path.join(path, "kernel.cu")
        text = open(cu, "rb").read() if os.path.isfile(cu) else b""
        rec = {"files": files, "kernel_cu_sha256": hashlib.sha256(text).hexdigest()}
        meta = None if slim else _load(os.path.join(path, "meta.json"))
        if meta is not None:
            rec["meta"] = meta
        out["entries"][name] = rec
        family = name.split(".")[-2] if name.startswith("kernel.") else name.rsplit(".", 1)[0]
        if family not in seen_family:
            seen_family.add(family)
            sample[name] = text.decode(errors="replace")
    if not slim:
        out["kernel_cu_samples"] = sample
    index = _load(os.path.join(vdir, "warm-index.json"))
    out["warm_index"] = {kid: r["entry"] for kid, r in (index or {}).get("kernels", {}).items()}
    warm = _load(os.path.join(vdir, "warm.json"))
    out["warm"] = {k: warm.get(k) for k in ("backend", "compiled", "failed", "already_cached", "kernels",
                                            "seconds")} if isinstance(warm, dict) else None
    out["warm_rc"] = (version.get("steps", {}).get("warm") or {}).get("rc")
    sweep = _load(os.path.join(vdir, "warm-sweep.json"))
    if sweep:
        out["sweep_after_warm"] = {
            "calls": sum(k["calls"] for k in sweep.get("keys", [])),
            "new_entries": [[f"{GEMM_TYPE[k['kind']]}/{k['n']}/{k['k']}/{k['num_groups']}", e[0], e[1]]
                            for k in sweep.get("keys", []) for e in k["new_entries"]],
            "errors": [e for k in sweep.get("keys", []) for e in k["errors"][:2]],
            "truncated_at": [k["truncated_at"] for k in sweep.get("keys", []) if k["truncated_at"]],
            "keys": [[f"{GEMM_TYPE[k['kind']]}/{k['n']}/{k['k']}/{k['num_groups']}", k["m_first"], k["m_last"],
                      k["calls"]] for k in sweep.get("keys", [])]}
    shared = _load(os.path.join(vdir, "shared-roots-sweep.json"))
    if shared:  # DeepJIT (0.2.x): the warmed cache as a read-only second root behind an empty writable one
        info = version.get("shared_roots") or {}
        out["shared_roots"] = {
            "roots": info.get("roots"), "shared_unchanged": info.get("shared_unchanged"),
            "files_in_writable_root": info.get("writable_count"),
            "calls": sum(k["calls"] for k in shared.get("keys", [])),
            "new_entries": [e[:2] for k in shared.get("keys", []) for e in k["new_entries"]],
            "errors": [e for k in shared.get("keys", []) for e in k["errors"][:2]],
            "truncated_at": [k["truncated_at"] for k in shared.get("keys", []) if k["truncated_at"]]}
    out["probe"] = _load(os.path.join(vdir, "probe.json"))
    return out


def main() -> None:
    slim = sys.argv[1:2] == ["--slim"]
    args = sys.argv[2:] if slim else sys.argv[1:]
    out_path, pairs = args[0], args[1:]
    record = {"columns": ["m_first", "m_last", "block_m", "block_n", "cluster_m", "cluster_n", "stages", "swizzle_d",
                          "smem", "num_sms"],
              "columns_sgl_kernel": ["m_first", "m_last", "block_m", "block_n", "multicast", "multicast_on_a",
                                     "stages", "swizzle_cd", "smem", "sms", "sms_launch"],
              "runs": {}, "releases": {}}
    for run_name, root, provenance in zip(pairs[0::3], pairs[1::3], pairs[2::3], strict=True):
        def text(name, root=root):
            path = os.path.join(root, name)
            return open(path).read() if os.path.isfile(path) else None

        record["runs"][run_name] = {"provenance": provenance, "machine": text("machine.txt"),
                                    "nvcc_version": text("nvcc_version.txt")}
        for name in sorted(os.listdir(root)):
            if os.path.isfile(os.path.join(root, name, "version.json")):
                rel = release(os.path.join(root, name), slim)
                rel["run"] = run_name
                record["releases"][f"{name}@{run_name}" if name in record["releases"] else name] = rel
    with open(out_path, "w") as f:
        json.dump(record, f, indent=0, sort_keys=True)
    for name, rel in record["releases"].items():
        print(name, len(rel["keys"]), "keys", sum(len(k["runs"]) for k in rel["keys"].values()), "runs",
              len(rel["entries"]), "entries", "warm_index", len(rel["warm_index"]),
              "after-warm new", len((rel.get("sweep_after_warm") or {}).get("new_entries", [])))


if __name__ == "__main__":
    main()
