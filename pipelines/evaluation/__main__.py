"""``python -m pipelines.evaluation``: the evaluation harness's command line (:mod:`pipelines.evaluation.cli`)."""

import sys

from pipelines.evaluation.cli import main

sys.exit(main())
