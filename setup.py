"""What pyproject.toml cannot say: the one compiled module, and the configs' package.

- The scoring alignment (``asrkit.scoring._align``) is ``optional``: without a C compiler
  the install still succeeds and scoring uses the Python alignment (same results, slower).
- The Hydra configs live in ``conf/`` at the top of the checkout and ship inside the
  package as ``asrkit/conf`` (the ``asrkit.conf`` package is that folder), so an installed
  asrkit finds its defaults; a checkout reads them in place (:data:`asrkit.config.DEFAULT_CONFIG_DIR`).
"""

from pathlib import Path

from setuptools import Extension, find_packages, setup

#: conf/ and each folder in it (config groups: data/, model/, ...) as packages of YAML files;
#: a config in a deeper folder would not ship (``tests/unit/test_training.py`` checks there is none).
CONF_PACKAGES = {
    "asrkit.conf": "conf",
    **{f"asrkit.conf.{d.name}": f"conf/{d.name}" for d in sorted(Path("conf").iterdir()) if d.is_dir()},
}

setup(
    packages=[*find_packages(include=["asrkit", "asrkit.*"]), *CONF_PACKAGES],
    package_dir=CONF_PACKAGES,
    package_data=dict.fromkeys(CONF_PACKAGES, ["*.yaml"]),
    ext_modules=[Extension("asrkit.scoring._align", ["asrkit/scoring/_align.c"], optional=True)],
)
