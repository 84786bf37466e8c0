"""Builds the one compiled module, the scoring alignment (everything else is in pyproject.toml).

``optional``: without a C compiler the install still succeeds and scoring uses the
Python alignment (same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("asrkit.scoring._align", ["asrkit/scoring/_align.c"], optional=True)])
