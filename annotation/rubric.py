"""The seed rubric now lives in the shared vocabulary, ``scoring.rubric``.

This path stays importable for existing callers; new code imports ``scoring.rubric``.
"""

from scoring.rubric import ATTRIBUTE_NAMES, DEFAULT_ATTRIBUTES, DEFAULT_RUBRIC_NAME  # noqa: F401
