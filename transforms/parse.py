"""The Beam transform that parses raw records: events to the main output, dead letters beside them.

The parsing itself is Beam-free and lives in :mod:`transforms.parsing`
(``ParseConfig``, ``parse_record``, ...); this module runs it in a DoFn with
counters, and re-exports the parser's public names for the callers that
import them from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from transforms.lines import LineBatch
from transforms.parsing import (EVENT_RAW_LIMIT, FILE_FORMATS, MAX_TIME, PARSE_NAMESPACE, PARSE_STAGE, FieldMapping,
                                ParseConfig, fast_path, parse_record, time_seconds, validated_record)
from transforms.records import DeadLetterRecord, Event

__all__ = ["EVENT_RAW_LIMIT", "FILE_FORMATS", "MAX_TIME", "PARSE_NAMESPACE", "PARSE_STAGE", "FieldMapping",
           "ParseConfig", "ParseEvents", "parse_record", "time_seconds"]


class _ParseFn(beam.DoFn):
    """Parses each raw record; events go to the main output, dead letters to ``dead_letters``.

    A ``LineBatch`` element (from ``transforms.lines.ReadLines``) is parsed line by line.
    """

    def __init__(self, config: ParseConfig):
        super().__init__()
        self.config = config
        self.records_read = beam.metrics.Metrics.counter(PARSE_NAMESPACE, "records_read")
        self.dead_letters = beam.metrics.Metrics.counter(PARSE_NAMESPACE, "dead_letters")

    def process(self, raw: Any) -> Iterator[Any]:
        if type(raw) is not LineBatch:
            self.records_read.inc()
            parsed = parse_record(raw, self.config)
            if type(parsed) is Event:
                yield parsed
            else:
                self.dead_letters.inc()
                yield beam.pvalue.TaggedOutput("dead_letters", parsed)
            return
        config, dead = self.config, 0
        fast = fast_path(config)
        self.records_read.inc(len(raw))
        for line in raw:
            parsed = (type(line) is str and fast(line, config)) or validated_record(line, config)
            if type(parsed) is Event:
                yield parsed
            else:
                dead += 1
                yield beam.pvalue.TaggedOutput("dead_letters", parsed)
        if dead:
            self.dead_letters.inc(dead)


class ParseEvents(beam.PTransform):
    """Raw records (or ``LineBatch`` es of them) to tagged outputs ``events`` (``Event``) and ``dead_letters``."""

    def __init__(self, config: ParseConfig, label: str | None = None):
        super().__init__(label)
        if not isinstance(config, ParseConfig):
            raise ValueError(f"config must be a ParseConfig, got {type(config).__name__}")
        self.config = config

    def expand(self, raw_records):
        import transforms.coders  # noqa: F401  registers the Event and DeadLetterRecord coders (no import cycle here)

        parse = beam.ParDo(_ParseFn(self.config)).with_output_types(Event, dead_letters=DeadLetterRecord)
        return raw_records | "ParseRecords" >> parse.with_outputs("dead_letters", main="events")
