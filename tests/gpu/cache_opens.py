"""What a job opened in a cache, as the kernel saw it: the runtime's lookups that hit, for a proof's asks record.

  python3 tests/gpu/cache_opens.py watch ROOT AREA... --marks DIR --out OPENS.json
      inotify watches on every directory under ROOT/AREA (and those created later); every file opened there between
      the creation of DIR/started and of DIR/ended (the job's own start and end: `dgprecompile launch` reads the
      cache before and after the job, and those reads are not the runtime's) is counted until SIGTERM or SIGINT,
      then written to OPENS.json ({"root": ..., "opened": {relative path: count}}). Prints "watching N
      directories" once the watches are set (start the launch after that line).
  python3 tests/gpu/cache_opens.py asks --opens OPENS.json --refusals STDERR --template ASKS.json --out ASKS.json
          [--driver DRIVER.json]
      the asks record (dgprecompile/data/schemas/proof-asks.json): the template's fields, with each family's entries
      the job opened (DeepGEMM's kernel directories under cache/, SGLang's module directories under tvm-ffi/,
      FlashInfer's module directories under flashinfer/), the modules a refusal named in STDERR and, from the model
      driver's report, the Triton MoE's and torch.compile's calls it recorded inside the job (its "asks").

Independent of dgprecompile's plan and hook: Linux's inotify (through ctypes) reports every open(2) of a file in a
watched directory, dlopen and DeepGEMM's cubin reads included, whoever opens it. A runtime that finds its entry opens
it; one that does not compiles, which strict launch refuses by name (those names are read from the job's stderr). So
opened plus refused is every lookup of these families in the run. Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import select
import signal
import struct
import sys

IN_OPEN, IN_CREATE, IN_MOVED_TO, IN_ISDIR, IN_Q_OVERFLOW = 0x20, 0x100, 0x80, 0x40000000, 0x4000
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
EVENT = struct.Struct("iIII")
# area -> (family, the asks field, the path parts below the area name that name what was asked: [first, last)).
# SGLang's ninja loader (0.5.20 on) keeps <arch>/<module>/build-<key>/: the module is the ask (its key holds the
# compilers' --version, which the CPU that checks the asks does not have; the run's 0 new entries prove the key)
AREAS = {"cache": ("deepgemm", "entries", 1, 2), "tvm-ffi": ("sglang-jit", "entries", 1, 2),
         "sglang-jit": ("sglang-jit", "modules", 2, 3), "flashinfer": ("flashinfer", "entries", 1, 5)}
REFUSED_MODULE = re.compile(r"(SGLang|FlashInfer) tried to build its JIT module (\S+) at run time")
# SGLang's own refusal under its strict switch (0.5.20 on: SGLANG_CRASH_ON_JIT_COMPILE, which launch sets)
REFUSED_BY_SGLANG = re.compile(r"JIT module '(\S+)' has no usable cached build under .*SGLANG_CRASH_ON_JIT_COMPILE")
REFUSER = {"SGLang": "sglang-jit", "FlashInfer": "flashinfer"}


class Watcher:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.dirs: dict[int, str] = {}
        self.opened: dict[str, int] = {}
        self.overflow = 0
        self.marks = -1  # the wd of the marks folder
        self.counting = None  # None: before the job's start mark; True: during the job; False: after it

    def add_marks(self, marks: str) -> None:
        self.marks = self.libc.inotify_add_watch(self.fd, os.path.abspath(marks).encode(), IN_CREATE | IN_MOVED_TO)
        if self.marks < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {marks}")

    def add_tree(self, top: str) -> None:
        for dirpath, dirnames, _ in os.walk(top):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            wd = self.libc.inotify_add_watch(self.fd, dirpath.encode(), IN_OPEN | IN_CREATE | IN_MOVED_TO)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {dirpath} (fs.inotify.max_user_watches?)")
            self.dirs[wd] = os.path.relpath(dirpath, self.root)

    def drain(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            at = 0
            while at < len(data):
                wd, mask, _, size = EVENT.unpack_from(data, at)
                name = data[at + EVENT.size:at + EVENT.size + size].split(b"\0", 1)[0].decode(errors="replace")
                at += EVENT.size + size
                self.event(wd, mask, name)

    def event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self.overflow += 1
            return
        if wd == self.marks:
            self.counting = {"started": True, "ended": False}.get(name, self.counting)
            return
        where = self.dirs.get(wd)
        if where is None or not name:
            return
        path = os.path.normpath(os.path.join(where, name))
        if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            self.add_tree(os.path.join(self.root, path))
        elif mask & IN_OPEN and not mask & IN_ISDIR and self.counting:
            self.opened[path] = self.opened.get(path, 0) + 1


def watch(root: str, areas: list[str], marks: str, out: str) -> int:
    w = Watcher(root)
    w.add_marks(marks)
    for area in areas:
        if os.path.isdir(os.path.join(w.root, area)):
            w.add_tree(os.path.join(w.root, area))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print(f"watching {len(w.dirs)} directories", flush=True)
    while not stop:
        try:
            select.select([w.fd], [], [], 0.5)
        except InterruptedError:
            pass
        w.drain()
    w.drain()
    with open(out, "w") as f:
        json.dump({"root": w.root, "areas": areas, "overflow": w.overflow, "job_ended": w.counting is False,
                   "opened": dict(sorted(w.opened.items()))}, f, indent=1)
    return 0


def entries(opened: dict[str, int]) -> dict[str, dict[str, list[str]]]:
    """family -> asks field -> the entries (directories under its area) or modules whose files were opened."""
    out: dict[tuple[str, str], set[str]] = {}
    for path in opened:
        parts = path.split("/")
        family, field, first, last = AREAS.get(parts[0], (None, "", 0, 0))
        if family and len(parts) > last:
            out.setdefault((family, field), set()).add("/".join(parts[first:last]))
    families: dict[str, dict[str, list[str]]] = {}
    for (family, field), names in sorted(out.items()):
        families.setdefault(family, {})[field] = sorted(names)
    return families


def asks(opens: str, refusals: str, template: str, out: str, driver: str | None = None) -> int:
    with open(opens) as f:
        seen = json.load(f)
    if seen["overflow"] or not seen["job_ended"]:
        print(f"the opens are not complete (inotify queue overflows: {seen['overflow']}, the job's end mark seen: "
              f"{seen['job_ended']})", file=sys.stderr)
        return 1
    with open(template) as f:
        record = json.load(f)
    with open(refusals, errors="replace") as f:
        text = f.read()
    refused = sorted(set(REFUSED_MODULE.findall(text)) | {("SGLang", m) for m in REFUSED_BY_SGLANG.findall(text)})
    families = entries(seen["opened"])
    for who, module in refused:
        families.setdefault(REFUSER[who], {}).setdefault("modules", []).append(module)
    if driver and os.path.exists(driver):  # the Triton MoE's and torch.compile's calls (launch/model_asks.py)
        with open(driver) as f:
            families.update(json.load(f).get("asks", {}))
    record["families"] = families
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(" ".join(f"{fam} {sum(len(v) for v in asked.values())}" for fam, asked in sorted(families.items())))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["watch"] and "--marks" in argv and argv[-2] == "--out":
        i = argv.index("--marks")
        return watch(argv[1], argv[2:i], argv[i + 1], argv[-1])
    if argv[:1] == ["asks"]:
        opts = dict(zip(argv[1::2], argv[2::2], strict=False))
        return asks(opts["--opens"], opts["--refusals"], opts["--template"], opts["--out"], opts.get("--driver"))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
