"""The toolkit's version (setup.py reads this file too)."""

__all__ = ["__version__"]

__version__ = "0.3.0"
