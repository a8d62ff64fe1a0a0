"""The example project's app that owns the scheduler."""
