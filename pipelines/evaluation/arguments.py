"""Command-line pieces every evaluation suite shares: the strict parser, the one-line argument error, the
names of the files a run keeps beside its results, and the check of a comma-separated list of names.

The central suite (:mod:`pipelines.evaluation.cli`) and the LDP-IDS suite (:mod:`pipelines.evaluation.ldp_cli`)
both import them from here, so neither command line imports the other's module at load time."""

from __future__ import annotations

import argparse

from pipelines.cli import ConfigError, job_parser

RUN_JSON = "run.json"
"""The run's command, commit, date, workers and wall time, kept beside its results.csv for re-rendering."""
PARTIAL_CSV = "results.partial.csv"
"""Rows written as runs finish (``--from-csv`` renders it if a long run is cut short)."""


class ArgumentError(ConfigError):
    """A bad command line: printed as one ``error:`` line, exit code 2."""


def evaluation_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The jobs' strict parser (``pipelines.cli.job_parser``): no abbreviations, one-line errors, defaults shown."""
    return job_parser(prog, description)


def checked_names(text: str, valid, what: str) -> list[str]:
    """The comma-separated names of ``text``, lower-cased, each checked against ``valid``, first occurrence kept;
    an empty list or an unknown name is an :class:`ArgumentError` naming the choices."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise ArgumentError(f"no {what} given")
    for name in names:
        if name not in valid:
            raise ArgumentError(f"unknown {what} {name!r}; choose from {', '.join(valid)}")
    return list(dict.fromkeys(names))
