"""Fixed pools of worker threads running serial tasks: work per topic or table without a thread per topic.

A :class:`SerialTask` is the work of one thing — a topic's committer, a
topic's write-ahead log, a table's checkpoints — run on a :class:`WorkerPool`
when asked:

* **Never twice at once.** A task runs on one worker at a time, so its state
  needs no more locking than it had with a thread of its own.
* **No request is lost.** :meth:`SerialTask.run_soon` while the task waits to
  run is merged into that run; while it runs, it makes the task run once more
  afterwards. A task that drains a queue therefore sees every item put in it
  before a ``run_soon``.
* **Deadlines from one timer.** :meth:`SerialTask.run_at` runs the task by a
  ``time.monotonic()`` deadline (a linger timer, an idle tick, a back-off).
  The pool keeps one heap of deadlines and one timer thread for all its
  tasks; a run that starts before a deadline satisfies it.
* **No exception ends a worker.** One that escapes a task is logged with the
  task's name; the worker goes on with the next task.

Runs are fair: a task asked to run again while it runs goes to the back of
the pool's queue. A task with nothing to do costs no thread; a pool starts its
threads on first use, up to its size. A task must not wait for another task of
its own pool: once every worker waits, nothing runs the tasks they wait for.

Process-wide pools (:func:`shared_pool`) serve the core's own background work
— write-ahead log writes, Delta checkpoints — for every topic of the process;
the ingest node sizes its committer pool with ``num.io.threads``.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["SerialTask", "WorkerPool", "shared_pool"]

log = logging.getLogger("logstore.common.workers")

_State = Literal["idle", "queued", "running"]


class SerialTask:
    """One thing's work (a callable without arguments) on a :class:`WorkerPool`; see the module docstring."""

    def __init__(self, pool: WorkerPool, fn: Callable[[], object], name: str) -> None:
        self.name = name
        self._pool = pool
        self._fn = fn
        self._state: _State = "idle"
        self._again = False
        self._deadline: float | None = None
        self._closed = False

    def run_soon(self) -> None:
        """Run the task as soon as a worker is free (once more after the current run, if it is running)."""
        with self._pool._lock:
            self._request()

    def run_at(self, deadline: float) -> None:
        """Run the task by ``deadline`` (``time.monotonic()`` seconds), unless it runs before then anyway."""
        with self._pool._lock:
            if self._closed or (self._deadline is not None and self._deadline <= deadline):
                return
            self._deadline = deadline
            self._pool._add_timer(deadline, self)

    def join(self) -> None:
        """Wait until the task neither runs nor waits to run (do not call from the task itself)."""
        with self._pool._lock:
            while self._state != "idle":
                self._pool._idle.wait()

    def close(self) -> None:
        """Never run the task again (a run in progress finishes)."""
        with self._pool._lock:
            self._closed = True
            self._deadline = None

    @property
    def closed(self) -> bool:
        return self._closed

    def _request(self) -> None:
        """:meth:`run_soon` with the pool's lock held."""
        if self._closed:
            return
        if self._state == "idle":
            self._state = "queued"
            self._pool._queue(self)
        elif self._state == "running":
            self._again = True


class WorkerPool:
    """At most ``threads`` worker threads (started on demand) and one timer thread, shared by many serial tasks.

    Thread-safe. Threads are daemons named ``<name>-<n>`` and ``<name>-timer``.
    """

    def __init__(self, threads: int, name: str) -> None:
        if threads < 1:
            raise ValueError(f"a worker pool needs at least one thread, not {threads}")
        self.name = name
        self.size = threads
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._tick = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._ready: collections.deque[SerialTask] = collections.deque()
        self._workers: list[threading.Thread] = []
        self._waiting = 0
        self._timers: list[tuple[float, int, SerialTask]] = []
        self._timer_seq = itertools.count()
        self._timer: threading.Thread | None = None
        self._shutdown = False

    def task(self, fn: Callable[[], object], name: str) -> SerialTask:
        """A new serial task running ``fn`` on this pool (``name`` appears in logs)."""
        return SerialTask(self, fn, name)

    @property
    def threads(self) -> int:
        """Threads this pool has started: its workers and its timer."""
        with self._lock:
            return len(self._workers) + (self._timer is not None)

    def shutdown(self) -> None:
        """Stop the threads once the tasks already queued have run; later requests are ignored."""
        with self._lock:
            self._shutdown = True
            self._work.notify_all()
            self._tick.notify_all()
            threads = [*self._workers, *([self._timer] if self._timer else [])]
        for t in threads:
            if t is not threading.current_thread():
                t.join()

    # -- internals (the pool's lock held) ---------------------------------------

    def _queue(self, task: SerialTask) -> None:
        if self._shutdown:
            task._state = "idle"
            return
        self._ready.append(task)
        if len(self._ready) > self._waiting and len(self._workers) < self.size:
            t = threading.Thread(target=self._work_loop, name=f"{self.name}-{len(self._workers)}", daemon=True)
            self._workers.append(t)
            t.start()
        else:
            self._work.notify()

    def _add_timer(self, deadline: float, task: SerialTask) -> None:
        if self._shutdown:
            return
        first = not self._timers or deadline < self._timers[0][0]
        heapq.heappush(self._timers, (deadline, next(self._timer_seq), task))
        if self._timer is None:
            self._timer = threading.Thread(target=self._timer_loop, name=f"{self.name}-timer", daemon=True)
            self._timer.start()
        elif first:
            self._tick.notify()

    # -- threads ----------------------------------------------------------------

    def _work_loop(self) -> None:
        while True:
            with self._lock:
                while not self._ready and not self._shutdown:
                    self._waiting += 1
                    self._work.wait()
                    self._waiting -= 1
                if not self._ready:
                    return
                task = self._ready.popleft()
                task._state, task._again, task._deadline = "running", False, None
            try:
                task._fn()
            except BaseException:  # logged: a task's failure must not end the worker
                log.exception("%s: task %s failed", self.name, task.name)
            with self._lock:
                if task._again and not task._closed and not self._shutdown:
                    task._state = "queued"
                    self._ready.append(task)  # behind the others: one busy task does not starve them
                else:
                    task._state = "idle"
                    self._idle.notify_all()

    def _timer_loop(self) -> None:
        with self._lock:
            while not self._shutdown:
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    deadline, _, task = heapq.heappop(self._timers)
                    if task._deadline == deadline:  # else it ran since, or was moved earlier
                        task._deadline = None
                        task._request()
                self._tick.wait(self._timers[0][0] - now if self._timers else None)


_shared: dict[str, tuple[int, WorkerPool]] = {}
_shared_lock = threading.Lock()


def shared_pool(name: str, threads: int) -> WorkerPool:
    """The process's pool called ``name``, created on first use (and again in a forked child, which has no threads)."""
    with _shared_lock:
        entry = _shared.get(name)
        if entry is None or entry[0] != os.getpid():
            entry = _shared[name] = (os.getpid(), WorkerPool(threads, name))
        return entry[1]
