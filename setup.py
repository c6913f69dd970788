"""Personalized w-event private stream histograms on Apache Beam.

``setup.py`` (not only pyproject) because Beam's ``--setup_file`` stages it
for Dataflow and Flink workers.
"""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="wevent-beam",
    version="0.1.0",
    description="Personalized and dynamic w-event differential privacy for infinite event streams on Apache Beam",
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["transforms", "transforms.*", "pipelines", "pipelines.*", "schemas",
                                    "schemas.*", "benchmarks", "benchmarks.*", "device", "device.*"]),
    package_data={"schemas": ["*.avsc"], "transforms": ["py.typed"], "pipelines": ["py.typed"]},
    entry_points={"console_scripts": ["wevent = pipelines.main:main"]},
    install_requires=[
        "apache-beam>=2.68,<3",
        "scipy>=1.11",  # transforms.mechanisms.metrics, imported by the replay's report
        "numpy>=2.0,<2.5",
        "pyarrow>=14,<26",
        "fastavro>=1.9",
        "cryptography>=41",
    ],
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "scipy>=1.11", "pytest-timeout>=2.3", "mypy>=1.10", "matplotlib>=3.8"],
        "plot": ["matplotlib>=3.8"],
    },
)
