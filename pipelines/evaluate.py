"""``python -m pipelines.evaluate``: the evaluation harness's documented entry (README, docs), kept as a thin alias
of ``python -m pipelines.evaluation``; the harness is the package :mod:`pipelines.evaluation`."""

import sys

from pipelines.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main())
