"""Local differential privacy (LDP-IDS foundations): frequency oracles and simulated users; never imports Beam.

:mod:`.oracles` holds GRR and OUE with exact, conservatively rounded
probabilities, the Ada choice rule, the estimators and V(eps, n);
:mod:`.simulate` runs the users' randomizers (user by user or as aggregate
counts) from the project's generator.  The device side is the standalone
``device/wevent_client.py``.  See ``docs/local_dp.md``.
"""

from transforms.mechanisms.ldp.oracles import FrequencyOracle, choose_oracle, ldp_variance, oracle_for
from transforms.mechanisms.ldp.simulate import aggregate_counts, locsan, perturb_values, report_counts

__all__ = ["FrequencyOracle", "aggregate_counts", "choose_oracle", "ldp_variance", "locsan", "oracle_for",
           "perturb_values", "report_counts"]
