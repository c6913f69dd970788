"""DPI (Feng et al., S&P 2024; spec ``dpi.md``): the mechanisms ``dpi`` and ``dpi-sound`` and their foundations.

:mod:`.pool` (the 0-DP synopsis pool, generated lazily from a public seed),
:mod:`.budgets` (the lifetime budget series in exact units, budget to learning
rate, Random Budget Allocation) and :mod:`.exponential` (the exact
exponential-mechanism draw of the sound variant); :mod:`.stream` (the slot
loop of both variants, their charges, restarts and state) and :mod:`.theory`
(the paper's bounds and metrics, for logging and tests).
"""
