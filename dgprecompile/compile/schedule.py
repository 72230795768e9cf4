"""warm's scheduler: which worker compiles what, who is blamed for a failure, and why the rest stops.

Pure state, no I/O: warm's loop (compile/warm_pool.py) tells it what each worker reported and carries out the
actions it returns. The queue is one list for every kind of work (DeepGEMM kernels of the plan's backend, SGLang
JIT modules), ordered by estimated cost, costliest first; a worker takes the first item of a kind it serves.

Events, from one worker's point of view::

    ready(kinds) -> [finished(item) ...]    its stdin is closed when nothing it serves is left
    fatal(kind)                              that kind could not be set up in it (the others may be)
    send_failed                              its stdin broke: the item goes back to the head of the queue
    stream_closed + exited(code)             both seen: the item it held, if any, failed with it

A ``budget`` bounds how many items are held at once over all workers (warm's --jobs, when it has more workers
than that: its zygote's workers and the Triton MoE chunks' slots, which take no zygote); a ready worker with
work left waits for a slot, and each freed slot goes to the waiting workers.

A finished item that reports a full filesystem stops the rest: every queued item is "not started". When every
worker is gone, what is left in the queue had no worker to build it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# why a queued item was never handed out
NO_SPACE = "no_space"
NO_WORKER = "no_worker"


@dataclass(frozen=True)
class Job:
    id: str
    kind: str  # the worker backend that builds it
    cost: float = 0.0  # estimated seconds; the queue hands out the costliest first


@dataclass(frozen=True)
class Send:
    worker: int
    job: Job


@dataclass(frozen=True)
class Close:
    """Close the worker's stdin: nothing it serves is left, so it finishes and exits."""
    worker: int


@dataclass(frozen=True)
class Lost:
    """The worker ended (``code``) while it held ``job``: that job failed with it."""
    worker: int
    job: Job
    code: int


@dataclass(frozen=True)
class NotStarted:
    job: Job
    why: str  # NO_SPACE or NO_WORKER


Action = Send | Close | Lost | NotStarted


@dataclass
class _Worker:
    kinds: frozenset[str] = frozenset()  # what it serves; empty until it is ready
    ready: bool = False
    held: Job | None = None
    open: bool = True  # its stdin is still open (we may hand it work)
    stream_closed: bool = False
    exit_code: int | None = None

    @property
    def gone(self) -> bool:
        return self.stream_closed and self.exit_code is not None


@dataclass
class Scheduler:
    queue: list[Job]
    workers: dict[int, _Worker] = field(default_factory=dict)
    stopped: str | None = None  # NO_SPACE once a worker met a full filesystem
    budget: int | None = None  # the most items held at once over all workers (None: one per worker)

    @classmethod
    def start(cls, jobs: list[Job], workers: int, budget: int | None = None) -> Scheduler:
        queue = sorted(jobs, key=lambda j: j.cost, reverse=True)  # stable: equal costs keep the plan's order
        return cls(queue, {i: _Worker() for i in range(workers)}, budget=budget)

    # -- events --
    def ready(self, w: int, kinds: list[str] | tuple[str, ...]) -> list[Action]:
        self.workers[w].kinds = frozenset(kinds)
        self.workers[w].ready = True
        return self._next(w)

    def finished(self, w: int, job_id: str, no_space: bool = False) -> list[Action]:
        """``job_id`` is done or failed in worker ``w``; a failure that met a full disk stops the rest."""
        worker = self.workers[w]
        if worker.held is not None and worker.held.id == job_id:
            worker.held = None
        actions: list[Action] = []
        if no_space and self.stopped is None:
            self.stopped = NO_SPACE
            actions += [NotStarted(job, NO_SPACE) for job in self.queue]
            self.queue.clear()
        return actions + self._wake()

    def fatal(self, w: int, kind: str | None = None) -> list[Action]:
        """A kind (None: every kind) could not be set up in worker ``w``. A worker that set up some kinds says
        which in ``ready``; one left with none is closed (it exits by itself too)."""
        worker = self.workers[w]
        worker.kinds = frozenset() if kind is None else worker.kinds - {kind}
        return self._close(w) if kind is None else []

    def send_failed(self, w: int) -> list[Action]:
        """Handing work to ``w`` broke its pipe: it is gone; its exit is reported separately."""
        worker = self.workers[w]
        if worker.held is not None:
            self.queue.insert(0, worker.held)
            worker.held = None
        return self._close(w) + self._wake()

    def stream_closed(self, w: int) -> list[Action]:
        self.workers[w].stream_closed = True
        return self._settle(w)

    def exited(self, w: int, code: int) -> list[Action]:
        self.workers[w].exit_code = code
        return self._settle(w)

    def widen(self, by: int) -> list[Action]:
        """``by`` more slots of the budget (builds beside the pool that held them have ended): idle workers take
        them at once (:meth:`_wake`). Without a budget (one item per worker) nothing changes."""
        if self.budget is None or by <= 0:
            return []
        self.budget += by
        return self._wake()

    def drained(self) -> list[Action]:
        """Every worker is gone: what is still queued had no worker to build it (or was stopped)."""
        left = [NotStarted(job, self.stopped or NO_WORKER) for job in self.queue]
        self.queue.clear()
        return left

    # -- state --
    def holding(self, w: int) -> Job | None:
        return self.workers[w].held

    def held(self) -> int:
        return sum(w.held is not None for w in self.workers.values())

    def open_workers(self) -> list[int]:
        return [i for i, w in self.workers.items() if w.open]

    # -- the rules --
    def _next(self, w: int) -> list[Action]:
        worker = self.workers[w]
        if not worker.open or worker.held is not None:
            return []
        if self.stopped:  # nothing more is handed out (an item put back by a broken pipe stays queued)
            return self._close(w)
        pos = self._head(w)
        if pos is None:
            return self._close(w)
        if self.budget is not None and self.held() >= self.budget:
            return []  # it waits for a slot (_wake)
        worker.held = self.queue.pop(pos)
        return [Send(w, worker.held)]

    def _head(self, w: int) -> int | None:
        """Where in the queue the costliest job worker ``w`` serves is (None: it serves none of what is left)."""
        kinds = self.workers[w].kinds
        return next((p for p, job in enumerate(self.queue) if job.kind in kinds), None)

    def _wake(self) -> list[Action]:
        """Slots may have come free: each goes to the idle worker whose next job is the costliest queued (the
        worker that just finished has no claim on its own slot: on 2026-12-07 the DeepGEMM-only early workers kept
        theirs for 34 s while the zygote's workers waited with SGLang's modules, the queue's costliest, behind
        them); idle workers with nothing left they serve are closed."""
        actions: list[Action] = []
        while True:
            idle = [i for i, w in self.workers.items() if w.ready and w.open and w.held is None]
            heads = {i: self._head(i) for i in idle}
            for i in [i for i, pos in heads.items() if pos is None or self.stopped]:
                actions += self._close(i)
                del heads[i]
            if not heads or (self.budget is not None and self.held() >= self.budget):
                return actions
            actions += self._next(min(heads, key=lambda i: (heads[i], i)))

    def _close(self, w: int) -> list[Action]:
        worker = self.workers[w]
        if not worker.open:
            return []
        worker.open = False
        return [Close(w)]

    def _settle(self, w: int) -> list[Action]:
        worker = self.workers[w]
        if not worker.gone:
            return []
        actions: list[Action] = []
        if worker.held is not None:
            actions.append(Lost(w, worker.held, worker.exit_code or 0))
            worker.held = None
        return actions + self._close(w) + self._wake()
