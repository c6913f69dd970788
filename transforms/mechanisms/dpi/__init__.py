"""DPI (Feng et al., S&P 2024; spec ``dpi.md``): the data-independent foundations.

:mod:`.pool` (the 0-DP synopsis pool, generated lazily from a public seed),
:mod:`.budgets` (the lifetime budget series in exact units, budget to learning
rate, Random Budget Allocation) and :mod:`.exponential` (the exact
exponential-mechanism draw of the sound variant).  The DPI loop, its ledger
and restarts are built on these later (issue #16).
"""
