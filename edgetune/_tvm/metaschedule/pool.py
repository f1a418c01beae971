"""Worker pools shielded from the terminal's Ctrl-C."""

from __future__ import annotations

import os
from typing import Any


def shielded_pool(workers: int, timeout: float | None, uses: int | None = None, stderr: Any = None) -> Any:
    """A ``PopenPoolExecutor`` whose worker processes never see the terminal's Ctrl-C (or a
    SIGTERM to the process group): its threads are started here with SIGINT and SIGTERM blocked,
    so the processes they spawn (now and when recycled) start with them blocked, and each worker
    then catches them with a no-op handler and unblocks them (:func:`shield_worker`), so the
    compilers it starts get them as usual. The driver decides when to stop and shuts the pool
    down, so a Ctrl-C neither kills a candidate half-measured nor prints a worker's traceback.
    The workers start (and import TVM) here, once."""
    import signal
    import threading

    from tvm.support.popen_pool import PopenPoolExecutor

    pool = PopenPoolExecutor(max_workers=workers, timeout=timeout, maximum_process_uses=uses, stderr=stderr,
                             initializer=shield_worker)
    sigs = {signal.SIGINT, signal.SIGTERM}
    shield = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs) if shield else None
    try:
        started = [pool.submit(os.getpid) for _ in range(workers)]  # one new thread per submit
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    for future in started:
        future.result()
    return pool


def shield_worker() -> None:
    """In each pool worker, once started: Ctrl-C and SIGTERM caught by a handler that does
    nothing, then unblocked. The worker still ignores them in effect, but the compilers and
    linkers it starts begin with the default dispositions and an empty mask (a caught signal is
    reset by exec, a blocked or ignored one is not), so they can be interrupted and killed."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, ignore_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def ignore_signal(_signum: int, _frame: Any) -> None:
    return None
