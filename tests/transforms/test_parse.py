"""The Beam transform around the parser (transforms/parse.py): outputs and counters."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline  # not `import TestPipeline`: pytest would try to collect it
from apache_beam.testing.util import assert_that, equal_to

from test_parsing import INSTANT, JSONL, avro, category_bin, line
from transforms.parse import PARSE_NAMESPACE, ParseConfig, ParseEvents
from transforms.records import NO_VALUE, Event


def counter(result, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_namespace(PARSE_NAMESPACE).with_name(name))["counters"]
    return sum(c.committed for c in counters)


def test_parse_events_pipeline_outputs_and_counters():
    good = [line(stream="taxi", user="a", time=INSTANT, value=1),
            line(user="b", time="2008-02-02T15:36:08Z", value=0, w=5, epsilon="0.5"),
            line(user="c", time=INSTANT, level="gold")]
    bad = ["{oops", line(user="d", time=INSTANT, value=100), line(user="e", time="never", value=1), ""]
    pipeline = test_pipeline.TestPipeline(runner=FnApiRunner())
    parsed = pipeline | beam.Create(good + bad) | ParseEvents(JSONL)
    assert parsed.events.element_type is Event
    assert_that(parsed.events, equal_to([
        Event("taxi", "a", INSTANT, 1, None, good[0]),
        Event("default", "b", INSTANT, 0, ("fixed", 5, "0.5"), good[1]),
        Event("default", "c", INSTANT, NO_VALUE, ("level", "gold"), good[2]),
    ]), label="events")
    assert_that(parsed["dead_letters"] | beam.Map(lambda dead: (dead["reason"], dead["user"], dead["record"])),
                equal_to([("malformed JSON", None, bad[0]), ("value out of domain [0, 100)", "d", bad[1]),
                          ("unparseable time 'never'", "e", bad[2]), ("empty line", None, "")]),
                label="dead letters")
    result = pipeline.run()
    result.wait_until_finish()
    assert counter(result, "records_read") == len(good) + len(bad)
    assert counter(result, "dead_letters") == len(bad)
    assert counter(result, "records_read") == len(good) + counter(result, "dead_letters")


def test_parse_events_pipeline_on_dict_records_with_to_bin():
    config = ParseConfig(bins=3, file_format="record", to_bin=category_bin)
    rows = [avro(user="a", time=1.0, mode="bike"), avro(user="b", time=2.0, mode="ufo")]
    pipeline = test_pipeline.TestPipeline(runner=FnApiRunner())
    parsed = pipeline | beam.Create(rows) | ParseEvents(config)
    assert_that(parsed.events | beam.Map(lambda event: (event.user, event.value)), equal_to([("a", 0)]),
                label="events")
    assert_that(parsed.dead_letters | beam.Map(lambda dead: dead["reason"]), equal_to(["unknown mode 'ufo'"]),
                label="dead letters")
    result = pipeline.run()
    result.wait_until_finish()
    assert counter(result, "records_read") == 2 and counter(result, "dead_letters") == 1


def test_parse_events_rejects_a_non_config():
    with pytest.raises(ValueError, match="^config"):
        ParseEvents({"bins": 3})
