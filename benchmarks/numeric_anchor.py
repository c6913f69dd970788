"""The reference anchor of issue #15: the authors' MATLAB per-user perturbation loop under GNU Octave beside ours.

    python -m benchmarks.numeric_anchor --users 200 --slots 40 --window 10 --epsilon 1 --json

The authors' code (github:RONGDUGithub/CAPP, ``Nosampling.zip``) perturbs one user's series at a time, one
slot at a time (``SW_sequence``: SW-direct; ``SW2_sequence_all``: APP, remembering the last ``w``
deviations).  It is read from the local mirror (``--mirror``, a bare git directory as the ``fetch`` tool
leaves it), unpacked into a temporary directory and run there by a small driver written here, which times
only the perturbation loops (``tic``/``toc``, Octave's start-up excluded), on ``users × slots`` uniform
values.  Ours is the core's ``Client.run`` (every user's step of a slot in one vectorised call, the
project's secure generator) on the same sizes, timed with ``perf_counter``.  Both run in this one call,
one after the other, on the same machine, each after one untimed user (Octave parses the function files on
their first call).  The reference spends ``ε/w`` per report, ours the strict
``ε/(w + h)``; the square wave's cost does not depend on ε.  Nothing of the reference is copied into the
project: it is unpacked into a temporary directory and deleted afterwards.

Prints JSON: per method the reference's and our seconds, both per user-slot, and the ratio
(reference / ours).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

from transforms.mechanisms.noise import secure_randomness
from transforms.mechanisms.numeric.perturbation import PerturbationParams

DEFAULT_MIRROR = "/work/.mirror/RONGDUGithub+CAPP/repo"
ARCHIVE = "Nosampling.zip"
REFERENCE_LOOPS = {"sw-direct": "SW_sequence(y(u, :), e)", "app": "SW2_sequence_all(y(u, :), w, e)"}
"""Our method -> the reference's per-user call (``y``: users × slots, ``e = ε/w``, ``w`` the window)."""


class AnchorUnavailable(RuntimeError):
    """Octave or the reference code is not there; ``str(error)`` says which."""


def reference_code(mirror: str, into: str) -> str:
    """Unpack the reference's ``Nosampling.zip`` from the bare git ``mirror`` into ``into``; the directory of
    its ``.m`` files."""
    if not os.path.isdir(mirror):
        raise AnchorUnavailable(f"no mirror of the reference at {mirror} (fetch github:RONGDUGithub/CAPP)")
    shown = subprocess.run(["git", "--git-dir", mirror, "show", f"HEAD:{ARCHIVE}"], capture_output=True, check=False)
    if shown.returncode != 0 or not shown.stdout:
        raise AnchorUnavailable(f"the mirror at {mirror} does not hold {ARCHIVE}: {shown.stderr.decode().strip()}")
    with zipfile.ZipFile(io.BytesIO(shown.stdout)) as archive:
        archive.extractall(into)
    code = os.path.join(into, "Nosampling")
    for name in ("SW.m", "SW_sequence.m", "SW2_sequence_all.m"):
        if not os.path.isfile(os.path.join(code, name)):
            raise AnchorUnavailable(f"{ARCHIVE} in the mirror lacks {name}")
    return code


def run_reference(octave: str, code: str, users: int, slots: int, window: int, epsilon: float,
                  methods: list[str]) -> tuple[dict, str]:
    """Seconds of each reference loop under Octave (run in ``code``), and Octave's version line."""
    lines = ["rand('seed', 1);", f"y = rand({users}, {slots}); w = {window}; e = {epsilon!r} / w;"]
    for method in methods:  # one user first (Octave parses the function files on their first call)
        lines += [f"u = 1; {REFERENCE_LOOPS[method]};", "tic;", f"for u = 1:{users}", f"  {REFERENCE_LOOPS[method]};", "end",
                  f"printf('{method} %.9f\\n', toc);"]
    driver = os.path.join(code, "wevent_anchor_driver.m")
    with open(driver, "w") as out:
        out.write("\n".join(lines) + "\n")
    done = subprocess.run([octave, "--no-gui", "--no-window-system", "--quiet", "--norc", driver], cwd=code,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AnchorUnavailable(f"octave failed: {done.stderr.strip()[-500:]}")
    seconds = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition(" ")
        if name in methods:
            seconds[name] = float(value)
    version = subprocess.run([octave, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    return seconds, version


def run_ours(users: int, slots: int, window: int, epsilon: float, method: str) -> float:
    """Seconds of the core's clients perturbing ``users × slots`` uniform values (secure generator)."""
    values = np.random.default_rng(1).random((users, slots))
    client = PerturbationParams(epsilon, window, "sw" if method == "sw-direct" else method).client
    rng = secure_randomness()
    client.run(values[:1], rng)  # warm-up, as the reference's
    started = time.perf_counter()
    client.run(values, rng)
    return time.perf_counter() - started


def measure(users: int, slots: int, window: int, epsilon: float, methods: list[str], mirror: str = DEFAULT_MIRROR,
            octave: str | None = None) -> dict:
    """Both sides on the same sizes (module doc); AnchorUnavailable when Octave or the reference is missing."""
    octave = octave or shutil.which("octave")
    if octave is None:
        raise AnchorUnavailable("GNU Octave is not installed (apt-get install octave)")
    with tempfile.TemporaryDirectory(prefix="wevent-anchor-") as scratch:
        code = reference_code(mirror, scratch)
        reference, version = run_reference(octave, code, users, slots, window, epsilon, methods)
    results = {}
    for method in methods:
        ours = run_ours(users, slots, window, epsilon, method)
        cells = users * slots
        results[method] = {"reference_seconds": reference[method], "ours_seconds": ours,
                           "reference_seconds_per_user_slot": reference[method] / cells,
                           "ours_seconds_per_user_slot": ours / cells, "ratio": reference[method] / ours}
    return {"users": users, "slots": slots, "window": window, "epsilon": epsilon, "octave": version,
            "methods": results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.numeric_anchor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--slots", type=int, default=40)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--methods", default=",".join(REFERENCE_LOOPS), help=f"of {', '.join(REFERENCE_LOOPS)}")
    parser.add_argument("--mirror", default=DEFAULT_MIRROR, help="bare git directory of github:RONGDUGithub/CAPP")
    parser.add_argument("--octave", help="the octave executable (default: on PATH)")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - REFERENCE_LOOPS.keys())
    if unknown or not methods or min(args.users, args.slots, args.window) < 1:
        parser.error(f"--methods from {', '.join(REFERENCE_LOOPS)} (got {unknown or 'none'}); "
                     "--users, --slots, --window at least 1")
    try:
        result = measure(args.users, args.slots, args.window, args.epsilon, methods, args.mirror, args.octave)
    except AnchorUnavailable as reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    if not args.json:
        for method, row in result["methods"].items():
            print(f"{method:>9}: reference {row['reference_seconds_per_user_slot'] * 1e6:9.2f} us, ours "
                  f"{row['ours_seconds_per_user_slot'] * 1e6:9.4f} us per user-slot: {row['ratio']:.0f}x",
                  file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
