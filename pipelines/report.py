"""What a job says about its run: ``report.json`` and, only on request, the NOT private evaluation.

Every job writes one ``report.json`` in one schema (``pipelines.job_report``); a Beam job's
records read, used and duplicated reach it through the ``accounting-*.jsonl`` lines
:class:`WriteAccounting` writes (its own outputs, not runner metrics).

``report.json`` holds only what the operator needs to run the job: counts of
records by fate (used, duplicates, late, dead letters), slots by kind, the
ledger's verdict, the configuration's release range and warnings.  Nothing in
it is computed from the true histograms (its record counts are exact, so it
stays with the operator like the metrics counters: docs/attack_model.md).

Utility against the true histograms (AMRE, MAE, MRE, AJSD; for a numeric
stream the errors against the true slot means, :class:`NumericUtility`) and the
plot of true counts are functions of the true data: with the releases and everyone
else's data they give a user's bin away.  They are computed only with
``--evaluate`` and written, by the pipeline itself, into
``OUTPUT/evaluation/`` beside a README saying so; they never pass through a
temporary file.
"""

from __future__ import annotations

import json

import apache_beam as beam
import numpy as np

from transforms.mechanisms.metrics import utility_report

EVALUATION_DIR = "evaluation"
EVALUATION_README = (
    "NOT PRIVATE. The files in this folder are computed from the TRUE histograms or slot means (utility of the "
    "releases "
    "against them, and with --plot a picture of true counts). Together with the releases and other users' data "
    "they can reveal a user's reports. Keep them with the raw data; never publish them beside the releases.\n")
EVALUATION_FILES = ("README.txt", "utility.json", "released_vs_true.png")


def evaluation_dir(output: str) -> str:
    """``OUTPUT/evaluation`` (local paths and gs:// alike)."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.join(output, EVALUATION_DIR)


class Utility(beam.CombineFn):
    """Released vs true histograms of every slot -> the utility metrics, and the series a plot needs."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, row):
        accumulator.append(row)
        return accumulator

    def merge_accumulators(self, accumulators):
        return [row for accumulator in accumulators for row in accumulator]

    def extract_output(self, rows):
        if not rows:
            return {}
        rows = sorted(rows)
        released = np.array([r[2] for r in rows], float)
        true = np.array([r[3] for r in rows], float)
        report = utility_report(released, true)
        return {"metrics": {"amre": report.amre, "ajsd": report.ajsd, "mre": report.mre, "mae": report.mae},
                "released": released, "true": true, "slots": [r[1] for r in rows]}


class NumericUtility(Utility):
    """A numeric stream's fresh releases vs the true means of their slots' holders -> the errors (domain units):
    ``mse``, ``rmse``, ``mae``, ``mean_error`` (the bias: estimate minus truth, averaged), the mean stated
    ``predicted_error`` and the ratio ``mse_over_predicted`` (at most about 1 when the stated errors are
    honest), over the slots with reports (a skipped slot repeats an estimate and states no error)."""

    def __init__(self, domain):
        self.domain = domain  # transforms.numeric_events.NumericDomain: the rows come in grid units

    def extract_output(self, rows):
        rows = sorted(self.domain.evaluation_in_domain_units(row) for row in rows
                      if np.isfinite(row[2][1]) and np.isfinite(row[3][0]))
        if not rows:
            return {}
        released = np.array([[r[2][0]] for r in rows], float)
        true = np.array([[r[3][0]] for r in rows], float)
        predicted = np.array([r[2][1] for r in rows], float)
        error = (released - true)[:, 0]
        mse = float(np.mean(error ** 2))
        metrics = {"mse": mse, "rmse": float(np.sqrt(mse)), "mae": float(np.mean(np.abs(error))),
                   "mean_error": float(np.mean(error)), "mean_predicted_error": float(np.mean(predicted)),
                   "mse_over_predicted": mse / float(np.mean(predicted)) if np.mean(predicted) > 0 else None}
        return {"metrics": metrics, "released": released, "true": true, "slots": [r[1] for r in rows],
                "predicted": predicted}


def per_user_evaluation_rows(element, domain) -> list:
    """The per-user stage's fresh release of a slot joined with its holders' true values (``((stream, slot),
    {"release": [record], "truth": [(holders, sum of grid indices)]})``) as a numeric evaluation row in grid
    units, as the simulated path's (``transforms.engine.evaluation_row``); NOT private."""
    (stream, slot), joined = element
    if not joined["release"] or not joined["truth"]:
        return []
    record, (holders, total) = joined["release"][0], joined["truth"][0]
    scale = domain.width / domain.steps
    estimate = (record["estimate"][0] - float(domain.low)) / scale
    return [(stream, slot, [estimate, record["predicted_error"] / scale ** 2], [total / holders])]


def write_evaluation(utility: dict, directory: str, plot: dict | None) -> None:
    """Write ``README.txt``, ``utility.json`` (the metrics) and with ``plot`` (the keyword arguments of
    ``pipelines.plots.plot_released_vs_true``: slot_seconds, origin, mechanism) the PNG into ``directory``."""
    _write(directory, "README.txt", EVALUATION_README.encode())
    payload = {"not_private": True, "slots": len(utility.get("slots", [])), **utility.get("metrics", {})}
    _write(directory, "utility.json", json.dumps(payload, indent=2).encode())
    if plot and utility:
        from pipelines.plots import plot_released_vs_true

        _write(directory, "released_vs_true.png", plot_released_vs_true(utility, **plot))


def _write(directory: str, name: str, data: bytes) -> None:
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)
    with FileSystems.create(FileSystems.join(directory, name)) as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------- accounting


def _read_pair(raw) -> tuple[str, int]:
    from transforms.lines import LineBatch

    return ("records_read", len(raw) if type(raw) is LineBatch else 1)


class CountRead(beam.PTransform):
    """Raw records (or ``LineBatch`` es, as ``ParseEvents`` reads them) -> ``("records_read", n)`` pairs."""

    def expand(self, raw):
        return raw | "ReadPairs" >> beam.Map(_read_pair)


def _accounting_line(pair: tuple[str, int]) -> str:
    return json.dumps({"counter": pair[0], "n": int(pair[1])}, sort_keys=True)


class WriteAccounting(beam.PTransform):
    """``(counter, n)`` pairs (records read, used, duplicates, late, dead letters) -> ``PREFIX-*.jsonl`` lines
    with their totals: one file for a bounded input, one per window of ``every`` seconds for an unbounded one.
    ``report.json`` reads them back (:func:`output_counts`)."""

    def __init__(self, prefix: str, every: float | None = None):
        super().__init__()
        self.prefix, self.every = prefix, every

    def expand(self, pairs):
        if pairs.is_bounded:
            return (pairs | "Totals" >> beam.CombinePerKey(sum) | "Lines" >> beam.Map(_accounting_line)
                    | "Write" >> beam.io.WriteToText(self.prefix, file_name_suffix=".jsonl", num_shards=1))
        from apache_beam.transforms.window import FixedWindows

        every = int(self.every or 60)
        return (pairs | "Windows" >> beam.WindowInto(FixedWindows(every)) | "Totals" >> beam.CombinePerKey(sum)
                | "Lines" >> beam.Map(_accounting_line)
                | "Write" >> beam.io.WriteToText(self.prefix, file_name_suffix=".jsonl", num_shards=1,
                                                 triggering_frequency=every))
