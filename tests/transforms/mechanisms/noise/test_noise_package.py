"""Tests for the package transforms.mechanisms.noise as a whole: its imports and what it exports."""

from __future__ import annotations

import ast
import io
import pickle
from pathlib import Path

from transforms.mechanisms import noise
from transforms.mechanisms.noise import InsecureSeededRandomness, Randomness, SecureRandomness

MODULES = sorted(Path(noise.__file__).parent.glob("*.py"))


def test_noise_modules_do_not_import_apache_beam():
    assert {path.stem for path in MODULES} == {
        "__init__", "binomial", "coins", "generators", "pool", "samplers", "variance"}
    for path in MODULES:
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, path  # absolute imports only: the check below sees every module
                imported.add(node.module)
        outside = {name for name in imported if not name.startswith("transforms.mechanisms.noise.")}
        outside.discard("transforms.mechanisms.certified")  # exact decimal brackets: standard library and budget units
        assert {name.split(".")[0] for name in outside} <= {
            "__future__", "abc", "cryptography", "decimal", "fractions", "math", "numbers", "numpy", "os", "random",
            "weakref"
        }, path


def classes_in_pickle(obj) -> set[tuple[str, str]]:
    """The (module, name) pairs a pickle of ``obj`` refers to."""
    found = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            found.add((module, name))
            return super().find_class(module, name)

    Recorder(io.BytesIO(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))).load()
    return found


def test_generators_pickle_under_the_package_name():
    # Checkpoints and Beam's state name the generator classes by the package, as before the split into
    # modules: the checkpoint loader's allow-list and checkpoints written by either release stay valid.
    for rng in (InsecureSeededRandomness(3), SecureRandomness()):
        classes = classes_in_pickle(rng)
        assert ("transforms.mechanisms.noise", type(rng).__name__) in classes
        assert not any(module.startswith("transforms.mechanisms.noise.") for module, _ in classes)
    assert Randomness.__module__ == "transforms.mechanisms.noise"
