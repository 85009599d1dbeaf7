"""The provider's version: a leaf, so the provider metadata and run tags can read it without the package face."""

__version__ = "0.1.0"
