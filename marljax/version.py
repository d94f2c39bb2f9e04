"""marljax's version (pyproject.toml says the same): `marljax --version`, `marljax.__version__`."""

__version__ = "0.1.0"
