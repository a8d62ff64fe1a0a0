"""Recipes for web frameworks, each tested with the real framework (the ``test`` extra)."""
