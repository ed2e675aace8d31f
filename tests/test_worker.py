"""The background worker: flush waits for queued work, failures are retried, close drains."""
from __future__ import annotations

import threading
import time

from ovos_memory_plugins._core.worker import BackgroundWorker, wakeups_deferred
from tests._timing import patience


def test_flush_waits_for_everything_queued_before_it():
    queue, done = list(range(10)), []

    def step():
        if not queue:
            return False
        time.sleep(0.005)
        done.append(queue.pop(0))
        return bool(queue)

    worker = BackgroundWorker("t", step)
    worker.notify()
    assert worker.flush(patience(10))
    assert done == list(range(10))
    worker.close()


def test_a_failing_step_is_retried_and_does_not_kill_the_thread():
    attempts = []

    def step():
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("temporary")
        return False

    worker = BackgroundWorker("t", step, retry_delay=0.01)
    worker.notify()
    deadline = time.time() + 5
    while len(attempts) < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert worker.flush(5) and len(attempts) >= 3
    worker.close()


def test_flush_without_work_returns_at_once_and_close_is_idempotent():
    worker = BackgroundWorker("t", lambda: False)
    assert worker.flush(0.1)
    worker.notify()
    assert worker.close(5)
    assert worker.close(5)


def test_flush_reports_false_while_the_work_keeps_failing():
    stop = threading.Event()

    def step():
        if not stop.is_set():
            raise RuntimeError("down")
        return False

    worker = BackgroundWorker("t", step, retry_delay=0.01)
    worker.notify()
    time.sleep(0.05)
    assert worker.flush(0.2) is False
    stop.set()
    worker.notify()
    assert worker.flush(5)
    worker.close()


def test_a_burst_gathers_into_one_step_and_flush_does_not_wait_out_the_delay():
    queued, batches = [], []

    def step():
        if queued:
            batches.append(list(queued))
            queued.clear()
        return False

    worker = BackgroundWorker("t", step, batch_delay=30.0)
    for item in range(50):
        queued.append(item)
        worker.notify()
    assert batches == []  # still gathering: nothing ran per item
    started = time.monotonic()
    assert worker.flush(patience(20))  # would time out if flush waited for the 30 s delay
    assert time.monotonic() - started < 20
    assert batches == [list(range(50))]
    queued.append(50)
    worker.notify()
    assert worker.close(20) and batches[-1] == [50]  # close drains without waiting the delay either


def test_wakeups_deferred_wakes_the_worker_only_when_the_block_ends():
    ran = threading.Event()

    def step():
        ran.set()
        return False

    worker = BackgroundWorker("t", step)
    with wakeups_deferred():
        with wakeups_deferred():  # nested: the outermost block decides
            worker.notify()
            worker.notify()
        assert worker._thread is None  # recorded, not started
        assert not ran.wait(0.05)
    assert ran.wait(patience(5))  # woken once the block ended
    assert worker.flush(patience(5))
    worker.close()


def test_wakeups_deferred_wakes_even_when_the_block_raises_and_flush_is_never_deferred():
    done = []
    worker = BackgroundWorker("t", lambda: done.append(1) and False)
    try:
        with wakeups_deferred():
            worker.notify()
            raise ValueError("a member failed")
    except ValueError:
        pass
    assert worker.flush(patience(5)) and done
    before = len(done)  # a busy machine may see one more step than notify() asked for
    with wakeups_deferred():
        worker.notify()
        assert worker.flush(patience(5))  # flush inside the block still runs the queued work
        assert len(done) > before
    worker.close()


def test_wakeups_are_deferred_only_on_the_thread_that_asked():
    ran = threading.Event()
    worker = BackgroundWorker("t", lambda: ran.set() and False)
    with wakeups_deferred():
        other = threading.Thread(target=worker.notify)
        other.start()
        other.join()
        assert ran.wait(patience(5))
    worker.close()


def test_close_drains_and_stops_within_one_timeout_not_two():
    # It waited up to `timeout` for the queue, then up to `timeout` again for the thread: a
    # longterm close() with a model request hanging took twice its documented bound.
    release = threading.Event()
    worker = BackgroundWorker("test", lambda: release.wait() and False)
    worker.notify()
    joins: list[float | None] = []
    thread = worker._thread
    assert thread is not None
    real_join = thread.join
    thread.join = lambda timeout=None: (joins.append(timeout), real_join(0))[1]  # type: ignore[method-assign]
    assert worker.close(timeout=0.4) is False  # the step never finished: not drained
    release.set()
    real_join(patience(5))
    assert joins and joins[0] is not None and joins[0] < 0.2, joins
