"""Packaging that pyproject.toml cannot say: templates/, etc/, data/ and jobs_csv/ stay at
the top of the checkout, where an admin looks for them, and ship inside the package as
slurm_synergy/<folder>, so that an install outside a checkout finds them too
(slurm_synergy/paths.py looks in both places)."""

from setuptools import find_packages, setup

SHIPPED = {"templates": ["*.j2"], "etc": ["*.j2", "*.lua", "*.toml", "simulate/*.toml"],
           "data": ["synergy/*.csv", "synergy/*.md", "zeus2/*.json", "zeus2/*.md"], "jobs_csv": ["*.csv"]}

setup(
    packages=[*find_packages(include=["slurm_synergy*", "profiler*"]),
              *(f"slurm_synergy.{folder}" for folder in SHIPPED)],
    package_dir={f"slurm_synergy.{folder}": folder for folder in SHIPPED},
    package_data={"slurm_synergy": ["py.typed", "probe/boot/sitecustomize.py"],
                  **{f"slurm_synergy.{folder}": globs for folder, globs in SHIPPED.items()}},
)
