"""Stopping an evaluation by a signal: one line, exit 130 (SIGINT) or 143 (SIGTERM), no worker left running.

A Ctrl-C reaches every process of the group; the evaluation's workers ignore it
(``experiment.run_in_pool``) and this process raises ``KeyboardInterrupt``.  A SIGTERM is sent to this process
alone: while :func:`stops_on_signal` is active it raises ``KeyboardInterrupt`` too, so the worker pool is
terminated as the exception leaves it, and :meth:`SignalStop.run` turns it into the one line and the exit code.
The runs finished before the signal stay in ``results.partial.csv`` (``--from-csv`` renders them).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator


class SignalStop:
    """Which signal stopped the job (SIGINT unless the SIGTERM handler saw one), and the line it ends with."""

    def __init__(self, job: str, partial: str):
        self.job, self.partial = job, partial
        self.signal: int = signal.SIGINT

    def run(self, function: Callable[..., int], *args) -> int:
        """``function(*args)``; a ``KeyboardInterrupt`` becomes one ``error:`` line and ``128 + signal``."""
        try:
            return function(*args)
        except KeyboardInterrupt:
            name = signal.Signals(self.signal).name
            print(f"error: {self.job} stopped by {name}; the runs finished before it are in {self.partial} "
                  f"(wevent {self.job} --from-csv {self.partial} renders them)", file=sys.stderr)
            return 128 + self.signal


@contextlib.contextmanager
def stops_on_signal(job: str, partial: str) -> Iterator[SignalStop]:
    """While active, SIGTERM raises ``KeyboardInterrupt`` in this (main) thread, remembered as SIGTERM."""
    stop = SignalStop(job, partial)

    def terminated(number, _frame) -> None:
        stop.signal = number
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_stopping_cleanly(argv: list[str], parse_args: Callable, evaluate: Callable[..., int], partial: str,
                         commit: Callable[[], str]) -> int:
    """A suite's entry point: ``parse_args(argv)`` (a bad command line is one ``error:`` line, exit 2), then
    ``evaluate(args, argv, started, commit())`` stopped cleanly by a signal (``partial``: the CSV file name of the
    runs finished so far, in ``args.output``)."""
    import os
    import time

    from pipelines.cli import ConfigError

    started, revision = time.perf_counter(), commit()
    try:
        args = parse_args(argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    with stops_on_signal("evaluate", os.path.join(args.output, partial)) as stop:
        return stop.run(evaluate, args, argv, started, revision)
