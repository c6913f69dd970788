"""pipelines.stopping: SIGINT and SIGTERM end a job with its clean-ups, one line and exit 130 or 143.

Before it, a signal left Beam's traceback and exit 1 (SIGINT, wrapped by Beam in a RuntimeError), or killed the
process without clean-up (SIGTERM, exit -15); every test here fails on that code.
"""

from __future__ import annotations

import signal

import pytest

from pipelines import cli
from pipelines.stopping import Interrupted, on_interrupt, signals_deferred, stops_cleanly


@pytest.fixture(autouse=True)
def sigint_as_in_a_terminal():
    """pytest run as a shell's background job starts with SIGINT ignored, which a job keeps ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def raise_signal(signum: int) -> None:
    """As if the operator sent it: the handler runs in this (the main) thread."""
    signal.raise_signal(signum)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_runs_the_clean_ups_and_exits_128_plus_the_signal_with_one_line(signum, code, capsys):
    cleaned = []

    @stops_cleanly("job")
    def job(argv=None) -> int:
        on_interrupt(lambda: cleaned.append("temporary files"), lambda: "resume with --resume-from ckpt/")
        try:
            raise_signal(signum)
        except KeyboardInterrupt as interruption:  # what Beam makes of it on the way out
            raise RuntimeError(f"{interruption!r} [while running 'Write']") from interruption
        return 0

    assert job([]) == code and cleaned == ["temporary files"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"job: stopped by {signal.Signals(signum).name} after ") and "resume with" in err
    assert signal.getsignal(signum) is not None and cli.stops_cleanly is stops_cleanly  # restored; one rule


def test_a_job_that_catches_the_interruption_itself_still_exits_130(capsys):
    @stops_cleanly("watch")
    def loop(argv=None) -> int:
        try:
            raise_signal(signal.SIGINT)
        except Interrupted:  # the watch loop: keeps its checkpoint, writes its report, returns its counts
            return 0
        return 5

    assert loop() == 130 and capsys.readouterr().err.startswith("watch: stopped by SIGINT")


def test_a_signal_inside_a_critical_section_takes_effect_at_its_end(capsys):
    steps = []

    @stops_cleanly("replay")
    def job(argv=None) -> int:
        on_interrupt(lambda: steps.append("outputs removed"))
        with signals_deferred():
            raise_signal(signal.SIGTERM)
            steps.append("published")
            on_interrupt(None)  # published: nothing to remove any more
        steps.append("never")
        return 0

    assert job() == 143 and steps == ["published"]


def test_without_a_signal_the_job_returns_its_own_code_and_errors_stay_errors():
    @stops_cleanly("job")
    def ok(argv=None) -> int:
        return 3

    @stops_cleanly("job")
    def broken(argv=None) -> int:
        raise ValueError("a bug")

    assert ok() == 3
    with pytest.raises(ValueError, match="a bug"):
        broken()


def test_an_inherited_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        @stops_cleanly("job")
        def job(argv=None) -> int:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            raise_signal(signal.SIGINT)  # ignored, as nohup or a shell's background job asked
            return 0

        assert job() == 0
    finally:
        signal.signal(signal.SIGINT, previous)
