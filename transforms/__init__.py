"""Personalized w-event private stream histograms: Beam transforms over a Beam-free mechanism core."""
