"""How every job stops on SIGINT and SIGTERM: its temporary files removed, one line, exit 128 + signal.

``stops_cleanly`` wraps a job's entry point (``run(argv) -> exit code``), so
``python -m pipelines.X`` and ``wevent X`` behave alike.  SIGINT (Ctrl-C) and
SIGTERM raise :class:`Interrupted` in the main thread, a ``KeyboardInterrupt``,
so code that stops cleanly on Ctrl-C (the watch loop keeps its checkpoint and
writes its report) stops the same way on SIGTERM.  Whatever the interruption
became on its way out (Beam wraps it in a ``RuntimeError``), the job runs the
clean-ups it registered (``on_interrupt``), prints one line on stderr and
exits 130 (SIGINT) or 143 (SIGTERM): never a traceback, never exit 1 (which
the jobs keep for ledger violations).  ``signals_deferred`` marks a critical
section (publishing what a finished pipeline wrote) that a signal never cuts
in half.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

EXIT_SIGNAL = 128
"""A job stopped by signal N exits 128 + N, as a shell reports it: 130 for SIGINT (Ctrl-C), 143 for SIGTERM."""


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP: dict[str, Any] = {"signal": None, "defer": 0, "raised": False, "cleanups": []}


def _on_signal(signum: int, _frame: object) -> None:
    if _STOP["signal"] is None:
        _STOP["signal"] = signum
    if _STOP["defer"] or _STOP["raised"]:  # inside a critical section, or already stopping: noted only
        return
    _STOP["raised"] = True
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A critical section: a signal received inside takes effect at its end, so the section is never left half
    done by SIGINT or SIGTERM (SIGKILL cannot be deferred)."""
    _STOP["defer"] += 1
    try:
        yield
    finally:
        _STOP["defer"] -= 1
    if not _STOP["defer"] and _STOP["signal"] is not None and not _STOP["raised"]:
        _STOP["raised"] = True
        raise Interrupted(_STOP["signal"])


def on_interrupt(cleanup: Callable[[], object] | None, hint: str | Callable[[], str | None] | None = None) -> None:
    """Register what a stopped job must undo and what its stop line tells the operator (``hint``, e.g. how to
    resume; a callable is asked once the job has stopped); ``None`` forgets every clean-up registered so far (the
    job's outputs are published)."""
    if cleanup is None:
        _STOP["cleanups"] = []
        return
    _STOP["cleanups"].append((cleanup, hint))


def remove_temporary_files(directory: str) -> None:
    """Beam's ``beam-temp-*`` folders and the ``*.part`` files a stopped job left in its (local) output folder."""
    if "://" in directory or not os.path.isdir(directory):
        return
    for path in glob.glob(os.path.join(directory, "beam-temp-*")):
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
    for path in glob.glob(os.path.join(directory, "*.part")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def stops_cleanly(job: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorate a job's entry point: on SIGINT or SIGTERM (also when the job caught the interruption and ended
    early, as the watch loop does) run the registered clean-ups and return ``128 + signal`` after one line on
    stderr.  A SIGINT the process inherited as ignored (``nohup``, a shell's background job) stays ignored."""

    def decorate(run: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(run)
        def stopping_cleanly(argv=None) -> int:
            if threading.current_thread() is not threading.main_thread():
                return run(argv)  # only the main thread receives signals
            handled = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
            previous = {s: signal.signal(s, _on_signal) for s in handled}
            _STOP.update(signal=None, defer=0, raised=False, cleanups=[])
            started = time.monotonic()
            try:
                try:
                    code = run(argv)
                    if _STOP["signal"] is None:
                        return code
                except BaseException:
                    if _STOP["signal"] is None:
                        raise
                finally:
                    _STOP["raised"] = True  # from here on a further signal is noted, not raised
                return _stopped(job, time.monotonic() - started)
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
                _STOP.update(signal=None, defer=0, raised=False, cleanups=[])

        return stopping_cleanly

    return decorate


def _stopped(job: str, seconds: float) -> int:
    """Run the clean-ups, print the one line, return the exit code."""
    signum = _STOP["signal"]
    notes = []
    for cleanup, hint in _STOP["cleanups"]:
        try:
            cleanup()
        except Exception as error:  # noqa: BLE001 - stopping must still end with its one line
            notes.append(f"clean-up failed: {error}")
        if callable(hint):
            try:
                hint = hint()
            except Exception:  # noqa: BLE001 - a hint is a courtesy; the one line must still print
                hint = None
        if hint:
            notes.append(hint)
    _STOP["cleanups"] = []
    sys.stdout.flush()
    print(f"{job}: stopped by {signal.Signals(signum).name} after {seconds:.1f} s; temporary files removed"
          + "".join(f"; {note}" for note in notes), file=sys.stderr, flush=True)
    return EXIT_SIGNAL + signum
