"""The one part of the build that pyproject.toml cannot say: the package list.

The shipped layouts live in the repository's top-level `layouts/` and install as the package data of
`vtui.layouts.builtin` (pyproject.toml's `package-dir` maps that package to `layouts/`). A mapped package
must be listed: setuptools' automatic `packages.find` only sees folders under `vtui/`, so it is called here
and the mapped package added to what it finds.
"""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["vtui*"]), "vtui.layouts.builtin"])
