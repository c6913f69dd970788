"""Pieces of the evaluation harness (``pipelines.evaluate``): statistics, the ratio experiments' OBS switch
points and the map of useful regimes."""
