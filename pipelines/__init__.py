"""pipelines package: the jobs (replay, streaming, evaluate, audit, local) and their command lines.

Importing the package first drops Beam's import-time notices (``pipelines.logs``), so every
``python -m pipelines.…`` command starts quietly.
"""

from pipelines import logs  # noqa: F401  (imported for its effect: Beam's notices silenced)
