"""The LDP-IDS paper's own numbers the evaluation is compared with (spec ``ldp_ids.md`` §7 TV-12, §8.6).

``TABLE2`` is the paper's Table 2 verbatim (bits per user per timestamp); ``TV12_MRE`` the spec author's own
re-simulation MREs at ε = 1, w = 20, n = 200,000, T = 800 (not the paper's: its figures' values were not
extracted); ``FIG3_TICKS`` the surviving tick ranges of Fig. 3.
"""

from __future__ import annotations

TABLE2_DATASETS = ("lns", "sin", "log", "taxi", "foursquare", "taobao")
TABLE2_SETTINGS = ((1.0, 20), (2.0, 20), (2.0, 40))
_TABLE2_ROWS = {
    (1.0, 20): {"lbu": (1.0000, 1.0000, 1.0000, 3.0000, 77.0000, 118.0000),
                "lbd": (1.5585, 1.5516, 1.5572, 4.2195, 102.5540, 146.0972),
                "lba": (1.3410, 1.3380, 1.3284, 3.8126, 93.4408, 136.9553),
                "lsp": (0.1000, 0.1000, 0.1000, 0.2032, 4.0208, 6.0602),
                "lpu": (0.1000, 0.1000, 0.1000, 0.1998, 3.9000, 5.9496),
                "lpd": (0.0912, 0.0913, 0.0915, 0.1870, 3.7815, 5.5106),
                "lpa": (0.0804, 0.0806, 0.0803, 0.1651, 3.5701, 4.7819)},
    (2.0, 20): {"lbu": (1.0000, 1.0000, 1.0000, 3.0000, 77.0000, 118.0000),
                "lbd": (1.5500, 1.5410, 1.5540, 4.2810, 102.9946, 144.9437),
                "lba": (1.3540, 1.3580, 1.3368, 3.8030, 93.3017, 136.7143),
                "lsp": (0.1000, 0.1000, 0.1000, 0.2032, 3.9431, 6.0602),
                "lpu": (0.1000, 0.1000, 0.1000, 0.1998, 3.9000, 5.9496),
                "lpd": (0.0934, 0.0933, 0.0937, 0.1917, 3.8728, 5.5243),
                "lpa": (0.0825, 0.0828, 0.0822, 0.1746, 3.8277, 4.7802)},
    (2.0, 40): {"lbu": (1.0000, 1.0000, 1.0000, 3.0000, 77.0000, 118.0000),
                "lbd": (1.5420, 1.5268, 1.4832, 4.1953, 99.4699, 145.3741),
                "lba": (1.3395, 1.3656, 1.3148, 3.7991, 92.6292, 136.4044),
                "lsp": (0.0500, 0.0500, 0.0500, 0.1038, 2.0048, 3.0301),
                "lpu": (0.0500, 0.0500, 0.0500, 0.0999, 1.9500, 2.9748),
                "lpd": (0.0485, 0.0484, 0.0490, 0.0987, 1.9454, 2.8806),
                "lpa": (0.0410, 0.0411, 0.0414, 0.0863, 1.8943, 2.3986)},
}
TABLE2: dict[tuple[float, int, str, str], float] = {
    (epsilon, window, method, dataset): value
    for (epsilon, window), methods in _TABLE2_ROWS.items()
    for method, values in methods.items()
    for dataset, value in zip(TABLE2_DATASETS, values)}
"""(ε, w, method, dataset) -> the paper's bits per user per timestamp (Table 2)."""

TV12_MRE: dict[tuple[str, str], float] = {
    (dataset, method): value
    for dataset, values in {"sin": (0.306, 0.260, 0.166, 0.031, 0.069, 0.055, 0.052),
                            "log": (0.103, 0.087, 0.068, 0.008, 0.025, 0.021, 0.019),
                            "lns": (0.243, 0.231, 0.150, 0.041, 0.056, 0.050, 0.047)}.items()
    for method, value in zip(("lbu", "lbd", "lba", "lsp", "lpu", "lpd", "lpa"), values)}
"""(dataset, method) -> the spec's re-simulation MRE at ε = 1, w = 20 (3 runs; its LNS is one path, seed 3)."""

FIG3_TICKS = {"lns": ("0.1-1.0", "0.05-0.2"), "sin": ("0.1-1.0", "0.05-0.2"), "log": ("0.02-0.16", "0.02-0.04"),
              "taxi": ("0.2-2.2", "0-0.6"), "foursquare": ("0.1-1.0", "0.1-0.2")}
"""Dataset -> Fig. 3's surviving y tick ranges (budget panel, population panel)."""


def predicted_bits(method: str, epsilon: float, window: int, users: int, slots: int, report_bits: int,
                   lbu_report_bits: int) -> float | None:
    """TV-12's prediction for the data-independent methods (None for the adaptive ones): LBU = b(ε/w);
    LPU = (b(ε)+1)/w · w⌊n/w⌋/n; LSP = #{t <= T : (t-1) mod w = 0} (b(ε)+1)/T."""
    if method == "lbu":
        return float(lbu_report_bits)
    if method == "lpu":
        return (report_bits + 1) / window * (window * (users // window)) / users
    if method == "lsp":
        return len(range(0, slots, window)) * (report_bits + 1) / slots
    return None
