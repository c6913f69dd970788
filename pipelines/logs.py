"""The project's logging and progress lines, configured explicitly (import this module before Beam).

Beam logs ``apitools not found`` with ``logging.warning`` while it is
imported, which configures the root logger on the way; importing this module
first gives the root logger a stderr handler (warnings and up) that drops
Beam's import-time notices, so they never print and the project's own
loggers keep their configuration.  ``configure(quiet)`` sets the project's
loggers (``pipelines``, ``transforms``, ``benchmarks``): INFO lines on stderr,
only warnings and errors with ``--quiet`` (Beam's own loggers and SDK workers: only errors).

``Progress`` prints one line on stderr every 5 s (``WEVENT_PROGRESS_SECONDS``) while a job runs
(records read, records/s, slots released, fresh so far); the graph feeds it
through ``count_read`` and ``count_release`` steps.  The counts are
process-wide, so they are complete when the SDK worker runs in this process
(FnApiRunner, the default); with workers in other processes the line shows
the elapsed time only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any

PROJECT_LOGGERS = ("pipelines", "transforms", "benchmarks")
BEAM_IMPORT_NOTICES = ("apitools not found",)
PROGRESS_SECONDS = 5.0

_LOGGER = logging.getLogger("pipelines.progress")


class _DropBeamImportNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(BEAM_IMPORT_NOTICES)


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is emitted (a test or a caller may have replaced it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _install_root_handler() -> None:
    root = logging.getLogger()
    if not root.handlers:
        stderr = _Stderr()
        stderr.setLevel(logging.WARNING)
        root.addHandler(stderr)
    for handler in root.handlers:
        handler.addFilter(_DropBeamImportNotices())


_install_root_handler()


def configure(quiet: bool = False) -> None:
    """The project's loggers print INFO lines on stderr (only warnings and errors with ``quiet``: a warning is
    about the configuration or the data, not progress); Beam's only warnings (only errors with ``quiet``)."""
    level = logging.WARNING if quiet else logging.INFO
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in PROJECT_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("apache_beam").setLevel(logging.ERROR if quiet else logging.WARNING)
    logging.getLogger().setLevel(logging.ERROR if quiet else logging.WARNING)


@contextlib.contextmanager
def quiet_workers(quiet: bool):
    """With ``quiet``: while the block runs, file descriptor 2 goes to /dev/null, so SDK workers started in
    other processes (which inherit it and log INFO lines before they know the pipeline's options) print
    nothing; the job's own errors print after the block."""
    if not quiet:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


# ---------------------------------------------------------------------------------------------- progress
_COUNTS = {"read": 0, "released": 0, "fresh": 0}
_LOCK = threading.Lock()


def count_read(element: Any) -> Any:
    """Graph step: counts raw records (a batch of lines counts each line); passes the element on."""
    n = len(element) if isinstance(element, list) else 1
    with _LOCK:
        _COUNTS["read"] += n
    return element


def count_release(release: dict) -> dict:
    """Graph step: counts releases and fresh ones; passes the release on."""
    with _LOCK:
        _COUNTS["released"] += 1
        _COUNTS["fresh"] += release.get("kind") == "fresh"
    return release


def add_counts(read: int = 0, released: int = 0, fresh: int = 0) -> None:
    """For loops that are not Beam graphs (the watch loop)."""
    with _LOCK:
        _COUNTS["read"] += read
        _COUNTS["released"] += released
        _COUNTS["fresh"] += fresh


def counts() -> dict:
    with _LOCK:
        return dict(_COUNTS)


class Progress:
    """``with Progress("replay"):`` prints a progress line every ``every`` seconds until the block ends."""

    def __init__(self, label: str, every: float | None = None):
        self.label = label
        self.every = every if every is not None else float(os.environ.get("WEVENT_PROGRESS_SECONDS",
                                                                          PROGRESS_SECONDS))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wevent-progress", daemon=True)
        self.started = 0.0

    def __enter__(self) -> Progress:
        with _LOCK:
            _COUNTS.update(read=0, released=0, fresh=0)
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        now = counts()
        elapsed = self.seconds
        if not any(now.values()):
            return f"{self.label}: {elapsed:.0f} s elapsed (counts arrive at the end with workers in other processes)"
        return (f"{self.label}: {elapsed:.0f} s, {now['read']:,} records read ({now['read'] / max(elapsed, 1e-9):,.0f}"
                f"/s), {now['released']:,} slots released, {now['fresh']:,} fresh")

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            _LOGGER.info("%s", self.line())
