"""The package version: the one place it is set (pyproject reads it; image tags derive from it)."""
__version__ = "0.1.0"
