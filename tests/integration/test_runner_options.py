"""A runner's own options (a ``PipelineOptions`` subclass in the runner's module, as Beam's Dask runner has) pass
the strict flag check once ``--runner`` names that runner: the parser imports it before checking."""

from __future__ import annotations

import sys

import pytest

from pipelines import cli, replay

RUNNER_MODULE = '''
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner


class ClusterOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--cluster_address_for_wevent_test", default=None)


class ClusterRunner(PipelineRunner):
    def run_pipeline(self, pipeline, options):
        raise NotImplementedError
'''


@pytest.fixture
def runner_module(tmp_path, monkeypatch):
    (tmp_path / "wevent_test_cluster_runner.py").write_text(RUNNER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "wevent_test_cluster_runner.ClusterRunner"
    sys.modules.pop("wevent_test_cluster_runner", None)


def test_an_option_defined_in_the_named_runners_module_is_accepted(runner_module):
    base = ["--input", "events.jsonl", "--binning", "int:4", "--requirement", "fixed:4,1", "--output", "out"]
    args, beam_args = cli.strict_parse(replay.parser(), [*base, "--runner", runner_module,
                                                         "--cluster_address_for_wevent_test", "127.0.0.1:8786"])
    assert beam_args == ["--runner", runner_module, "--cluster_address_for_wevent_test", "127.0.0.1:8786"]
    assert args.output == "out"


def test_a_misspelled_flag_is_still_refused_with_a_runner_named(runner_module):
    base = ["--input", "events.jsonl", "--binning", "int:4", "--requirement", "fixed:4,1", "--output", "out"]
    with pytest.raises(cli.ConfigError, match="unknown flag --epsilonn"):
        cli.strict_parse(replay.parser(), [*base, "--runner", runner_module, "--epsilonn", "1"])


def test_a_runner_that_cannot_be_loaded_leaves_its_message_to_the_options_check():
    base = ["--input", "events.jsonl", "--binning", "int:4", "--requirement", "fixed:4,1", "--output", "out"]
    _, beam_args = cli.strict_parse(replay.parser(), [*base, "--runner", "NoSuchRunner"])
    with pytest.raises(cli.ConfigError, match="--runner NoSuchRunner"):
        cli.pipeline_options(beam_args)
