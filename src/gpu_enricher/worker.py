"""One daemon thread that runs the GPU backend's blocking calls, one at a time, in order.

Why not a ThreadPoolExecutor: its threads are joined when the interpreter exits, so a call
hung in the driver (NVML stuck on a broken GPU) held SIGTERM up forever (issue 13, defect 1).
This thread is a daemon and is never joined: a hung call is abandoned at exit. It also knows
whether a call is really running: a cancelled `await` does not stop the call in the thread, so
"is a call running" must come from the thread, not from the coroutine that waited on it.
"""

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable

_Job = tuple["concurrent.futures.Future[object]", Callable[[], object]]


class BlockingWorker:
    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running_since: float | None = None

    def submit(self, fn: Callable[[], object]) -> "concurrent.futures.Future[object]":
        future: concurrent.futures.Future[object] = concurrent.futures.Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
        self._jobs.put((future, fn))
        return future

    @property
    def running_since(self) -> float | None:
        """time.monotonic() when the call in progress started; None when idle."""
        return self._running_since

    def stop(self) -> None:
        """Let the thread end after the call in progress and those queued (never waits)."""
        self._jobs.put(None)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn = job
            if not future.set_running_or_notify_cancel():
                continue
            self._running_since = time.monotonic()
            try:
                result = fn()
            except BaseException as exc:  # handed to the awaiting coroutine
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._running_since = None
