"""Evaluation harness: the papers' experiments on synthetic and real streams, swept, repeated and reported.

    python -m pipelines.evaluate --sweep epsilon,window --repeats 10 --output results/
    python -m pipelines.evaluate --report docs/results.md ...   # the committed results document

(the same command as ``python -m pipelines.evaluation`` and ``wevent evaluate``) runs the papers'
experiments (spec/pwsm.md §5) in-process, without Beam (``--suite ldp-ids`` runs the LDP-IDS experiments
instead: :mod:`pipelines.evaluation.ldp_cli`):

* datasets ``sin``, ``log``, ``tlns`` (N users, d = 2 bins, T slots); ``taxi`` (T-Drive, 1-minute
  slots) and ``foursquare`` (100-minute slots), each on a 10 x 10 grid, read from ``--data-dir``
  (``../shared/data``) and skipped, saying why, when absent; ``events``: any event file the replay
  job reads (``--input``, ``--input-format``, ``--binning``, ``--slot-seconds``).  Real streams carry
  each user's last bin forward; a user is absent until their first event
  (:mod:`pipelines.evaluation_data`); ``--users``/``--slots`` cap them (first users read, first slots);
* every central mechanism in ``MECHANISMS`` (or ``--mechanisms``), built by
  :func:`transforms.mechanisms.registry.mechanism_for_setup`: homogeneous ones run at the
  sweep point ``(E, w)``, personalized ones get the papers' ten user types around
  it, dynamic ones the per-type dynamic declarations under each requirement
  scenario of ``--scenarios`` (``redrawn`` every slot, ``held``, ``drifting``
  every ``--drift-every`` slots; run labels ``dpbd``, ``dpbd:held``, ...);
* sweeps ``epsilon`` (E in 0.2..1.0 at w = 120), ``window`` (w in 40..200 at
  E = 0.6), ``ratio`` (§6.5: a fraction o of users with E = 1.0, the rest
  E = 0.6, all w = 120) and ``wratio`` (a fraction o with w = 40, the rest
  w = 120, all E = 0.6); the ratio sweeps run the personalized fixed-requirement
  mechanisms only, with one stream for every o, and report where OBS switches
  (:mod:`pipelines.evaluation.ratio`);
* claims decided by paired sign-flip tests over repeats with Holm-adjusted
  p-values (:mod:`pipelines.evaluation.stats`); ``--regimes`` adds the map of
  where each mechanism publishes something useful, checked on T-Drive
  (:mod:`pipelines.evaluation.regimes`).

Each run streams all T slots through one mechanism without resetting it, unless
``--segment-reset K`` re-creates it every K slots as the authors' code does (250);
such rows carry ``w_event_guarantee_across_segments=false``, their
``max_window_usage_ratio`` is checked per segment and
``cross_segment_max_window_usage_ratio`` shows what the whole stream really spent.

Noise comes from a SEEDED generator so that every run is reproducible: this is
for evaluation only and is NOT private.  Data, requirements and the noise seed
depend on ``(--seed, dataset, E, w, repeat)`` only, so every mechanism, scenario
and ratio o of one repeat runs on the same stream with the same noise seed
(paired runs).  Results do not depend on ``--workers``.

Outputs in ``--output``: ``results.csv`` (one row per run; ``results.partial.csv`` fills as runs
finish, repeat by repeat, and ``--from-csv`` renders it if a run is cut short), ``summary.md`` (mean ± std over
repeats beside the papers' AMRE, and the papers' headline claims checked on these runs) and,
when matplotlib is installed, PNG plots (one panel per dataset, log y).  ``--report PATH``
also writes that document to PATH, headed by the command that made it, with its plots and
``results.csv`` in the folder PATH without ``.md``; ``--from-csv`` renders all of it again from a
run's ``results.csv`` (same options) without running anything.  AMRE is the papers' metric, which is a
mean *squared* error.  Exit code 1 (after writing the outputs) when a ledger saw more than a
requirement spent in some window; 2 for bad arguments.

Modules: :mod:`~pipelines.evaluation.sweeps` (datasets, sweep points, run labels),
:mod:`~pipelines.evaluation.experiment` (one run per task, the plan, workers, results.csv),
:mod:`~pipelines.evaluation.claims` (the papers' claims, paired tests), :mod:`~pipelines.evaluation.paper`
(the papers' numbers), :mod:`~pipelines.evaluation.report` (the document), :mod:`~pipelines.evaluation.plots`,
:mod:`~pipelines.evaluation.cli` (the command line), and :mod:`~pipelines.evaluation.stats`,
:mod:`~pipelines.evaluation.ratio`, :mod:`~pipelines.evaluation.regimes`.  The LDP-IDS suite:
:mod:`~pipelines.evaluation.ldp` (runs, experiments), :mod:`~pipelines.evaluation.ldp_data` (real streams),
:mod:`~pipelines.evaluation.ldp_metrics`, :mod:`~pipelines.evaluation.ldp_claims`,
:mod:`~pipelines.evaluation.ldp_paper`, :mod:`~pipelines.evaluation.ldp_report`, :mod:`~pipelines.evaluation.ldp_cli`.
"""
