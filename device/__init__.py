"""The device side: the standard-library-only clients a phone embeds (see ``device/README.md``).

``device.wevent_client`` answers frequency and mean requests (LDP-IDS, PLBU) and keeps the user's own
w-event budget; ``device.numeric_client`` runs the numeric methods on top of it.  Neither imports numpy,
Beam or anything of the collector's core: agreement tests check them against it.
"""
