"""Shared vocabulary: the seed rubric, the distortion label set and the parsers of rating cells.

Framework-free on purpose (no Django, no app imports; import-linter checks it): annotation,
judging and analysis all import it, and notebooks and workers can use it on its own.
See docs/architecture.md.
"""
