"""warm's scheduler (compile/schedule.py) driven directly with fake workers: pure events, no processes.

The end-to-end behaviour (real nvcc, real workers, signals) is tests/test_warm.py and tests/test_warm_nvcc.py;
these pin the rules: costliest first across kinds, a worker takes only what it serves, a dead worker's item is
blamed on it, a full disk stops the rest, what no worker can build is named at the end.
"""

from __future__ import annotations

import random

from dgprecompile.compile.schedule import NO_SPACE, NO_WORKER, Close, Job, Lost, NotStarted, Scheduler, Send

DG, JIT = "nvcc", "sglang-jit"


def sent(actions):
    return [(a.worker, a.job.id) for a in actions if isinstance(a, Send)]


def closed(actions):
    return [a.worker for a in actions if isinstance(a, Close)]


def test_one_queue_hands_out_the_costliest_first_across_kinds():
    jobs = [Job("k1", DG, 4.0), Job("k2", DG, 6.0), Job("jit", JIT, 45.0), Job("k3", DG, 2.0)]
    s = Scheduler.start(jobs, 2)
    assert sent(s.ready(0, [DG, JIT])) == [(0, "jit")]
    assert sent(s.ready(1, [DG, JIT])) == [(1, "k2")]
    assert sent(s.finished(1, "k2")) == [(1, "k1")]
    assert sent(s.finished(1, "k1")) == [(1, "k3")]
    assert closed(s.finished(1, "k3")) == [1]  # nothing left: its stdin closes, it exits
    assert closed(s.finished(0, "jit")) == [0]
    assert s.drained() == []


def test_equal_costs_keep_the_plans_order():
    s = Scheduler.start([Job(f"k{i}", DG, 1.0) for i in range(5)], 1)
    order = [sent(s.ready(0, [DG]))[0][1]]
    while True:
        actions = s.finished(0, order[-1])
        if not sent(actions):
            break
        order.append(sent(actions)[0][1])
    assert order == ["k0", "k1", "k2", "k3", "k4"]


def test_a_worker_takes_only_the_kinds_it_serves():
    s = Scheduler.start([Job("jit", JIT, 45.0), Job("k", DG, 4.0)], 2)
    assert sent(s.ready(0, [DG])) == [(0, "k")]  # the costlier JIT module waits for a worker that builds it
    assert closed(s.finished(0, "k")) == [0]
    assert sent(s.ready(1, [JIT])) == [(1, "jit")]


def test_a_kind_that_could_not_be_set_up_is_left_to_the_workers_that_have_it():
    s = Scheduler.start([Job("jit", JIT, 45.0), Job("k", DG, 4.0)], 2)
    assert s.fatal(0, JIT) == []  # worker 0 goes on with DeepGEMM's kernels
    assert sent(s.ready(0, [DG])) == [(0, "k")]
    assert s.fatal(1, JIT) == [] and s.fatal(1, DG) == []
    assert s.stream_closed(1) == [] and closed(s.exited(1, 3)) == [1]  # it served nothing and exited
    assert closed(s.finished(0, "k")) == [0]
    assert s.drained() == [NotStarted(Job("jit", JIT, 45.0), NO_WORKER)]


def test_a_worker_that_dies_is_blamed_for_the_item_it_held_once_both_stream_and_exit_are_seen():
    s = Scheduler.start([Job("a", DG, 2.0), Job("b", DG, 1.0)], 2)
    s.ready(0, [DG])
    s.ready(1, [DG])
    assert s.exited(0, -9) == []  # the exit alone: its last events may still be in the pipe
    lost = s.stream_closed(0)
    assert lost[0] == Lost(0, Job("a", DG, 2.0), -9) and closed(lost) == [0]
    assert s.holding(0) is None
    assert closed(s.finished(1, "b")) == [1]
    assert s.drained() == []


def test_a_worker_that_reported_its_item_before_dying_is_not_blamed():
    s = Scheduler.start([Job("a", DG, 2.0)], 1)
    s.ready(0, [DG])
    s.finished(0, "a")
    assert [a for a in s.stream_closed(0) + s.exited(0, 1) if isinstance(a, Lost)] == []


def test_a_full_disk_stops_everything_not_yet_handed_out():
    s = Scheduler.start([Job(f"k{i}", DG, 10.0 - i) for i in range(5)], 2)
    s.ready(0, [DG])
    s.ready(1, [DG])
    actions = s.finished(0, "k0", no_space=True)
    assert [(a.job.id, a.why) for a in actions if isinstance(a, NotStarted)] == [("k2", NO_SPACE), ("k3", NO_SPACE),
                                                                                ("k4", NO_SPACE)]
    assert closed(actions) == [0] and sent(actions) == []
    assert closed(s.finished(1, "k1")) == [1]  # the one in flight finishes; nothing more is handed out
    assert s.stopped == NO_SPACE and s.drained() == []


def test_after_a_full_disk_an_item_put_back_is_not_handed_out_again():
    s = Scheduler.start([Job("a", DG, 2.0), Job("b", DG, 1.0)], 2)
    s.ready(0, [DG])
    s.ready(1, [DG])
    s.finished(0, "a", no_space=True)
    assert closed(s.send_failed(1)) == [1]  # its "b" goes back to the queue, but the warm has stopped
    s.stream_closed(1)
    s.exited(1, 0)
    assert [(a.job.id, a.why) for a in s.drained()] == [("b", NO_SPACE)]


def test_a_broken_pipe_puts_the_item_back_at_the_head_for_another_worker():
    s = Scheduler.start([Job("a", DG, 2.0), Job("b", DG, 1.0)], 2)
    s.ready(0, [DG])
    assert closed(s.send_failed(0)) == [0]
    assert sent(s.ready(1, [DG])) == [(1, "a")]
    assert sent(s.finished(1, "a")) == [(1, "b")]


def test_every_worker_gone_leaves_the_queue_to_drained():
    s = Scheduler.start([Job("a", DG, 2.0), Job("b", DG, 1.0)], 1)
    s.fatal(0, None)
    s.stream_closed(0)
    s.exited(0, 3)
    assert [(a.job.id, a.why) for a in s.drained()] == [("a", NO_WORKER), ("b", NO_WORKER)]


def _random_run(seed: int) -> None:
    rng = random.Random(seed)
    kinds = [DG, JIT]
    jobs = [Job(f"i{n}", rng.choice(kinds), rng.random() * 50) for n in range(rng.randint(0, 12))]
    n = rng.randint(1, 4)
    s = Scheduler.start(jobs, n)
    ended: list[str] = []
    holding: dict[int, str] = {}
    open_ = set(range(n))

    def take(actions):
        for a in actions:
            if isinstance(a, Send):
                assert a.worker in open_ and a.worker not in holding
                holding[a.worker] = a.job.id
            elif isinstance(a, Close):
                open_.discard(a.worker)
            elif isinstance(a, Lost):
                assert holding.pop(a.worker) == a.job.id
                ended.append(a.job.id)
            else:
                ended.append(a.job.id)

    alive = list(range(n))
    for w in alive:
        take(s.ready(w, rng.sample(kinds, rng.randint(1, 2))))
    while alive:
        w = rng.choice(alive)
        roll = rng.random()
        if w in holding and roll < 0.85:  # it reports its item (done or failed; now and then a full disk)
            job = holding.pop(w)
            ended.append(job)
            take(s.finished(w, job, no_space=roll < 0.05))
        elif w in holding or w not in open_ or roll < 0.95:  # it dies, or exits once its stdin is closed
            alive.remove(w)
            take(s.stream_closed(w) + s.exited(w, -9 if w in holding else 0))
    take(s.drained())
    assert sorted(ended) == sorted(j.id for j in jobs), seed
    assert not holding


def test_random_event_orders_build_or_blame_every_item_exactly_once():
    """Any interleaving of workers finishing, dying and failing: each item ends exactly once (done, lost or
    not started), no worker holds two, and nothing is sent to a closed worker."""
    for seed in range(300):
        _random_run(seed)


# ---- a shared budget: zygote workers and the Triton MoE chunks' slots (warm's --jobs) ----

TRITON = "triton-moe"


def test_chunk_slots_start_at_once_and_the_zygotes_workers_wait_for_a_slot_of_the_budget():
    """Workers 0-1 are the zygote's (ready late), slots 2-3 run Triton chunks (ready at once); budget 2."""
    jobs = [Job("c1", TRITON, 9.0), Job("c2", TRITON, 8.0), Job("c3", TRITON, 7.0), Job("k1", DG, 4.0),
            Job("k2", DG, 3.0)]
    s = Scheduler.start(jobs, 4, budget=2)
    assert sent(s.ready(2, [TRITON])) == [(2, "c1")] and sent(s.ready(3, [TRITON])) == [(3, "c2")]
    assert s.ready(0, [DG]) == [] and s.ready(1, [DG]) == []  # ready, but the budget is held: they wait, open
    assert s.held() == 2 and s.open_workers() == [0, 1, 2, 3]
    assert sent(s.finished(2, "c1")) == [(2, "c3")]  # the slot that freed it takes the costliest it serves
    out = s.finished(3, "c2")  # nothing left for slot 3: it closes, and its slot of the budget goes to a worker
    assert closed(out) == [3] and sent(out) == [(0, "k1")] and s.held() == 2
    out = s.finished(2, "c3")
    assert closed(out) == [2] and sent(out) == [(1, "k2")]
    assert closed(s.finished(0, "k1")) == [0] and closed(s.finished(1, "k2")) == [1] and s.drained() == []


def test_slots_freed_beside_the_pool_go_to_its_idle_workers_at_once():
    """warm holds slots of --jobs for the graphs' parts beside the pool; when those end, ``widen`` gives them to
    the pool: waiting workers take the costliest jobs now, never past the new budget, and without a budget (one
    item per worker) widening changes nothing."""
    jobs = [Job(f"k{i}", DG, 10.0 - i) for i in range(5)]
    s = Scheduler.start(jobs, 4, budget=1)
    assert sent(s.ready(0, [DG])) == [(0, "k0")]
    assert s.ready(1, [DG]) == [] and s.ready(2, [DG]) == [] and s.ready(3, [DG]) == []  # the budget is held
    assert s.widen(0) == [] and s.held() == 1
    assert sent(s.widen(2)) == [(1, "k1"), (2, "k2")] and s.held() == 3 and s.budget == 3
    assert sent(s.finished(0, "k0")) == [(0, "k3")] and s.held() == 3  # still within the widened budget
    free = Scheduler.start([Job("a", DG, 1.0)], 1)
    assert free.widen(4) == [] and free.budget is None


def test_the_budget_is_never_exceeded_and_every_job_is_handed_out_once():
    rng = random.Random(7)
    jobs = [Job(f"c{i}", TRITON, rng.random() * 10) for i in range(6)] + [
        Job(f"k{i}", DG, rng.random() * 5) for i in range(9)]
    s = Scheduler.start(jobs, 7, budget=3)  # 4 zygote workers, 3 chunk slots
    holding: dict[int, str] = {}
    done: list[str] = []

    def take(actions):
        for w, job in sent(actions):
            assert w not in holding
            holding[w] = job
        assert len(holding) <= 3 and s.held() == len(holding)

    for slot in (4, 5, 6):
        take(s.ready(slot, [TRITON]))
    for w in range(4):
        take(s.ready(w, [DG]))
    while holding:
        w = rng.choice(sorted(holding))
        done.append(holding.pop(w))
        take(s.finished(w, done[-1]))
    assert sorted(done) == sorted(j.id for j in jobs) and s.open_workers() == [] and s.drained() == []


def test_a_worker_with_nothing_it_serves_left_closes_at_once_even_when_the_budget_is_held():
    s = Scheduler.start([Job("c1", TRITON, 9.0)], 2, budget=1)
    assert sent(s.ready(1, [TRITON])) == [(1, "c1")]
    assert closed(s.ready(0, [DG])) == [0]  # no DeepGEMM work at all: it does not wait for a slot


def test_a_freed_slot_goes_to_the_waiting_worker_with_the_costliest_job_not_back_to_its_holder():
    """2026-12-07, DeepSeek-V3 on 16 jobs (3 held by FlashInfer, 5 by Triton MoE chunks): the early workers (DeepGEMM
    only, ready at once) took each freed slot back for their next kernel, so the zygote's workers, ready at 15 s with
    SGLang's modules (the queue's costliest), waited until the kernels ran out at 34 s; the pool, and the graphs
    after it, ended 20 s later than they had to. A freed slot now goes to the costliest waiting job."""
    jobs = [Job("jit", JIT, 20.0)] + [Job(f"k{i}", DG, 5.0) for i in range(3)]
    s = Scheduler.start(jobs, 2, budget=1)
    assert sent(s.ready(0, [DG])) == [(0, "k0")]  # the early worker: the JIT module is not its kind
    assert sent(s.ready(1, [DG, JIT])) == []  # the zygote's worker waits for the one slot
    assert sent(s.finished(0, "k0")) == [(1, "jit")]  # not (0, "k1")
    assert sent(s.finished(1, "jit")) == [(0, "k1")]  # equal heads: the lower index, as before
    actions = s.finished(0, "k1")
    assert sent(actions) == [(0, "k2")] and closed(actions) == [1]  # nothing left that worker 1 may take
    actions = s.finished(0, "k2")
    assert sent(actions) == [] and closed(actions) == [0]
    assert s.drained() == []
