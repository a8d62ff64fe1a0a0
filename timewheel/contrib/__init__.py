"""Small integrations with web frameworks (see ``docs/web.md``).

Each module imports its framework only when used, never at package import, and the framework is
not a dependency of timewheel: install it yourself.
"""
