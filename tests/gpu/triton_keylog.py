"""Record the parts of every Triton cache key a process computes (a diagnostic for misses between two processes).

Triton names a compiled kernel's cache entry by sha256 of ``triton_key()-src.hash()-backend.hash()-options.hash()-
env_vars`` (triton/runtime/cache.py get_cache_key). This wraps that function where Triton's compiler and JIT look
it up and appends one JSON line per key to the file named by ``DGP_TRITON_KEYLOG``: the kernel, its specialisation
(signature, constexprs, attrs), the backend and options hashes with the options themselves, the env vars, and the
entry name. Two such logs (a GPU-free warm and a GPU run of the same calls) show which part differs.

usage: ``import triton_keylog; triton_keylog.install()`` before the first launch, or
``python tests/gpu/triton_keylog.py A.jsonl B.jsonl`` to compare two logs (prints the differing parts).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys


def _entry_name(key: str) -> str:
    # compile() hashes the key with sha256; the FileCacheManager names the directory by base32 of that digest
    return base64.b32encode(hashlib.sha256(key.encode()).digest()).decode().rstrip("=")


def install(path: str | None = None) -> None:
    from triton.compiler import compiler
    from triton.runtime import cache, jit

    out = path or os.environ.get("DGP_TRITON_KEYLOG")
    if not out:
        return
    real = cache.get_cache_key

    def get_cache_key(src, backend, backend_options, env_vars):
        key = real(src, backend, backend_options, env_vars)
        rec = {"kernel": getattr(src, "name", "?"), "fn_cache_key": getattr(getattr(src, "fn", None), "cache_key", None),
               "signature": {str(k): str(v) for k, v in getattr(src, "signature", {}).items()},
               "constants": {str(k): str(v) for k, v in getattr(src, "constants", {}).items()},
               "attrs": str(getattr(src, "attrs", "")), "src_hash": src.hash(), "backend_hash": backend.hash(),
               "options_hash": backend_options.hash(),
               "options": {k: str(v) for k, v in sorted(backend_options.__dict__.items())},
               "env_vars": {k: str(v) for k, v in sorted(env_vars.items())},
               "triton_key_sha256": hashlib.sha256(cache.triton_key().encode()).hexdigest(),
               "entry": _entry_name(key), "pid": os.getpid()}
        with open(out, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        return key

    cache.get_cache_key = compiler.get_cache_key = jit.get_cache_key = get_cache_key


def compare(a: str, b: str) -> int:
    """Group both logs by kernel and specialisation-independent parts; print what differs between them."""
    def load(p):
        with open(p) as f:
            return [json.loads(line) for line in f if line.strip()]

    left, right = load(a), load(b)
    lk = {r["entry"]: r for r in left}
    rk = {r["entry"]: r for r in right}
    print(f"{a}: {len(lk)} entries; {b}: {len(rk)} entries; common {len(set(lk) & set(rk))}")
    for name in sorted(set(r["kernel"] for r in left + right)):
        ls = [r for r in left if r["kernel"] == name]
        rs = [r for r in right if r["kernel"] == name]
        if not ls or not rs:
            print(f"{name}: only in {'left' if ls else 'right'}")
            continue
        for part in ("fn_cache_key", "backend_hash", "options_hash", "env_vars", "triton_key_sha256"):
            lv = {json.dumps(r[part], sort_keys=True) for r in ls}
            rv = {json.dumps(r[part], sort_keys=True) for r in rs}
            if lv != rv:
                print(f"{name}: {part} differs:\n  left  {sorted(lv)[:3]}\n  right {sorted(rv)[:3]}")
        lspec = {json.dumps([r["signature"], r["constants"], r["attrs"]], sort_keys=True) for r in ls}
        rspec = {json.dumps([r["signature"], r["constants"], r["attrs"]], sort_keys=True) for r in rs}
        for s in sorted(rspec - lspec)[:4]:
            print(f"{name}: specialisation only in right: {s}")
        for s in sorted(lspec - rspec)[:4]:
            print(f"{name}: specialisation only in left: {s}")
        lo = {json.dumps(r["options"], sort_keys=True) for r in ls}
        ro = {json.dumps(r["options"], sort_keys=True) for r in rs}
        if lo != ro:
            print(f"{name}: options only in right: {sorted(ro - lo)[:2]}\n  only in left: {sorted(lo - ro)[:2]}")
    return 0


if __name__ == "__main__":
    sys.exit(compare(sys.argv[1], sys.argv[2]))
