"""The package's version (read by the build from here, and by ``timewheel --version``)."""

__version__ = "0.1.0.dev0"
