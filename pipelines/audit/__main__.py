"""``python -m pipelines.audit``: the same as ``wevent audit``."""

import sys

from pipelines.audit.cli import run

sys.exit(run())
