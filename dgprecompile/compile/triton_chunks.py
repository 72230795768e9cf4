"""A Triton fused-MoE item's warm, spread over the worker budget: its m set cut into chunks, each chunk one
``python -m dgprecompile.compile.triton_moe`` subprocess (families.TRITON_MOE), started by warm's parent at once
(they need nothing the zygote imports), and the item's record written once, whole, when every chunk is in.

Which m go together: Triton compiles one ``fused_moe_kernel`` instance per distinct specialisation (the config's
constexprs, and per int argument: == 1, divisible by 16, or neither; data/triton_moe.yaml ``m_set``). Of the ints,
only ``num_valid_tokens`` (m * topk) and ``EM`` (the aligned buffer's length) follow m; the config follows m only up
to the shape's largest tuned m (data/triton_moe_tuned.yaml; none: SGLang's default config, one for every m). So
the m are grouped by an ESTIMATE of their specialisation (:func:`group_key`: the two ints' classes, and below the
tuned bound the m's octave, since SGLang's tuned keys are about log-spaced) and whole groups are dealt to the
chunks, the heaviest first onto the lightest chunk. Two m of one specialisation in two chunks cost a compile
twice; an estimate that is off costs time, never an entry: each chunk runs SGLang's own calls for its m and Triton
finds or compiles what they need, and the item's entries are the union of what its chunks' calls used.

No torch, no triton, no sglang here: warm's parent uses it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.triton_moe import HOST_FIELDS, make_record
from dgprecompile.errors import CompileFailed, DGError
from dgprecompile.host import lifeline
from dgprecompile.runtimes.items import TritonMoeItem
from dgprecompile.runtimes.triton_moe import TRITON_MOE

CALL_WEIGHT = 0.005  # one m's calls relative to one compile (an estimate: ~4 ms a call against ~1 s a compile)
CHUNK_MARK = "#"  # a chunk's job id: <item id>#<i>/<n>


def int_class(v: int) -> str:
    """Triton's specialisation of an int argument (data/triton_moe.yaml m_set.evidence.triton)."""
    return "1" if v == 1 else "D" if v % 16 == 0 else ""


def group_key(m: int, item: TritonMoeItem, tuned_up_to: int) -> tuple:
    """The estimated specialisation of the item's calls at ``m``: m == 1 (a dimension of 1); num_valid_tokens =
    m * topk; EM = m * topk * BLOCK_SIZE_M below the align bound, else m * topk + (E + 1) * (BLOCK_SIZE_M - 1)
    (data/triton_moe.yaml m_set.evidence.ints, with E the rank's experts, as Triton 3.6.0 + sglang 0.5.14 compiled
    for m 1..4 of E=20 top-8: EM not divisible by 16 from m = 3; BLOCK_SIZE_M taken as a multiple of 16); the m's
    octave while a tuned config can change with m."""
    tokens = m * item.topk
    em = tokens * 16 if tokens < item.experts + 1 else tokens - item.experts - 1
    return m == 1, int_class(tokens), int_class(em), m.bit_length() if m <= tuned_up_to else 0


def plan_chunks(item: TritonMoeItem, ms: list[int], budget: int, tuned_up_to: int) -> list[list[int]]:
    """The item's m cut into at most ``budget`` chunks of whole groups (:func:`group_key`; a group heavier than a
    chunk's share in runs: :func:`split`), the heaviest group first onto the lightest chunk; largest chunk first."""
    groups: dict[tuple, list[int]] = {}
    for m in ms:
        groups.setdefault(group_key(m, item, tuned_up_to), []).append(m)
    n = max(1, min(budget, len(ms)))
    share = sum(map(weight, groups.values())) / n
    pieces = [piece for g in groups.values() for piece in split(g, share)]
    n = min(n, len(pieces))
    chunks: list[list[int]] = [[] for _ in range(n)]
    load = [0.0] * n
    for g in sorted(pieces, key=lambda g: (-weight(g), g[0])):
        i = min(range(n), key=lambda j: (load[j], j))
        chunks[i] += g
        load[i] += weight(g)
    return sorted((sorted(c) for c in chunks if c), key=lambda c: (-weight_of(c, item, tuned_up_to), c[0]))


def split(group: list[int], share: float) -> list[list[int]]:
    """A group whose calls alone outweigh a chunk's share, cut into runs of consecutive m (each run compiles the
    group's kernels again, but the calls no longer hold up one chunk); any other group whole."""
    k = min(len(group), max(1, math.ceil(CALL_WEIGHT * len(group) / share))) if share > 0 else 1
    size = -(-len(group) // k)
    return [group[i:i + size] for i in range(0, len(group), size)]


def weight(group: list[int]) -> float:
    return 1.0 + CALL_WEIGHT * len(group)


def weight_of(chunk: list[int], item: TritonMoeItem, tuned_up_to: int) -> float:
    """A chunk's estimated cost: one compile per group it holds, plus its calls."""
    return len({group_key(m, item, tuned_up_to) for m in chunk}) + CALL_WEIGHT * len(chunk)


def ms_text(ms: list[int]) -> str:
    """Sorted m as the warm's ``--m`` (spans: ``1-3,7,9-10``)."""
    spans: list[list[int]] = []
    for m in ms:
        if spans and m == spans[-1][1] + 1:
            spans[-1][1] = m
        else:
            spans.append([m, m])
    return ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in spans)


def parse_ms_text(text: str) -> list[int]:
    """:func:`ms_text` read back (``1-3,7``)."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def item_ms(item: TritonMoeItem) -> list[int]:
    return sorted({m for lo, hi in item.m_spans() for m in range(lo, hi + 1)})


@dataclass(frozen=True)
class Chunk:
    id: str  # <item id>#<i>/<n>
    item: str
    m_text: str
    m_count: int
    cost: float


def chunks_for(item: TritonMoeItem, budget: int, tuned_up_to: int, seconds_per_unit: float) -> list[Chunk]:
    cut = plan_chunks(item, item_ms(item), budget, tuned_up_to)
    return [Chunk(f"{item.id}{CHUNK_MARK}{i + 1}/{len(cut)}", item.id, ms_text(c), len(c),
                  seconds_per_unit * weight_of(c, item, tuned_up_to)) for i, c in enumerate(cut)]


def chunk_argv(item: TritonMoeItem, chunk: Chunk, cache_dir: str, python: str) -> list[str]:
    argv = TRITON_MOE.warm_argv(item, cache_dir, python)
    argv[argv.index("--m") + 1] = chunk.m_text
    return argv


def start_chunk(argv: list[str], log: Path, env: dict[str, str], keep_fds: tuple[int, ...] = (),
                nice: int = 0) -> subprocess.Popen:
    """The chunk's subprocess, in its own session (stopped with its compilers: :func:`stop_chunk`; and ended with
    them when warm dies, SIGKILL included: lifeline.end_with_warm), holding ``keep_fds`` (warm's scratch lock: the
    scratch stays warm's until the chunk has ended); its report comes on stdout, its log goes to ``log``. SGLang
    points the caches it does not own (inductor, CUDA's, TileLang's) at $SGLANG_CACHE_DIR, by default
    ~/.cache/sglang: a warm writes only into its cache, so they go to a scratch folder beside the log (warm's own
    temporary folder, removed after it). ``nice``: its CPU priority that much lower (lifeline.lowered)."""
    scratch = log.parent / f"{log.stem}.sglang-cache"
    scratch.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                env={**env, **TRITON_MOE.warm_env, "SGLANG_CACHE_DIR": str(scratch),
                                     "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
                                     lifeline.WARM_PID_ENV: str(os.getpid())},
                                start_new_session=True, pass_fds=keep_fds, preexec_fn=lifeline.lowered(nice))


def stop_chunk(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    lifeline.kill_job(proc.pid)  # the compilers it left (ptxas, the C compiler): its session


def parse_report(chunk_id: str, code: int, stdout: str, log: Path) -> dict[str, Any]:
    """The chunk's report (its last stdout line), or CompileFailed naming what went wrong."""
    if code != 0:  # everything it printed: compile/build_log.py picks its first error lines and keeps the log
        try:
            printed = log.read_text(errors="replace").strip()
        except OSError:
            printed = ""
        raise CompileFailed(f"python -m {TRITON_MOE.warm_module} exited with code {code} for {chunk_id}:\n"
                            f"{printed or 'no output'}")
    try:
        report = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise CompileFailed(f"python -m {TRITON_MOE.warm_module} printed no report for {chunk_id}") from None
    if report.get("not_whole"):
        raise CompileFailed(f"{chunk_id}: Triton left entries that are not whole: "
                            f"{', '.join(report['not_whole'][:5])}")
    if not report.get("entries"):
        raise CompileFailed(f"{chunk_id}: the warm's calls used no {report.get('kernel', TRITON_MOE.kernel)} "
                            "entry (nothing was compiled or found)")
    return report


def merge_host(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The chunks' host-module reports as one (compile/triton_host.py): left to capture if any chunk left them."""
    hosts = [r.get("host_modules") for r in reports]
    if any(h is None for h in hosts):
        return None
    left = [h["left_to_capture"] for h in hosts if "left_to_capture" in h]
    if left:
        return {"left_to_capture": left[0]}
    first = hosts[0]
    launchers = {k: v for h in hosts for k, v in (h.get("launchers") or {}).items()}
    merged = {"cuda_utils": first.get("cuda_utils"), "launchers": dict(sorted(launchers.items())),
              "entries": sorted({e for h in hosts for e in h.get("entries") or []}), "machine": first.get("machine")}
    return {k: v for k, v in merged.items() if k in HOST_FIELDS}


@dataclass
class ChunkedItem:
    """One item's chunks as they come in; done when every chunk reported (a failed chunk fails the item)."""

    item: str
    chunks: list[str]
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    @property
    def done(self) -> bool:
        return len(self.reports) + len(self.failures) == len(self.chunks)

    def record(self, installed: dict[str, Any]) -> dict[str, Any]:
        """The item's record (cache/triton_moe.py): the union of the chunks' entries, every m, one host report."""
        reports = [self.reports[c] for c in self.chunks]
        entries = sorted({f"{TRITON_MOE.area}/{e}" for r in reports for e in r["entries"]})
        return make_record(self.item, installed, entries, round(sum(self.seconds.values()), 2),
                           sum(int(r.get("ms") or 0) for r in reports), merge_host(reports))

    @property
    def warmed(self) -> bool:
        return any(r.get("warmed") for r in self.reports.values())

    def finish(self, store, installed: dict[str, Any]) -> dict[str, Any]:
        """Once every chunk is in: the item's event, ``done`` with its record written in one index update, or
        ``failed`` naming the first failed chunk (nothing recorded: verify finds the item missing)."""
        if self.failures:
            first = next(c for c in self.chunks if c in self.failures)
            return {"event": "failed", "kernel": self.item, "error": self.failures[first]}
        record = self.record(installed)
        try:
            store.update_index(lambda index: index.triton_moe.__setitem__(self.item, record))
        except (OSError, DGError) as exc:
            return {"event": "failed", "kernel": self.item, "error": f"recording it in the index: {exc}"}
        return {"event": "done", "kernel": self.item, "status": "compiled" if self.warmed else "cached",
                "seconds": record["seconds"]}
