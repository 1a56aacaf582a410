"""The judge-output parser now lives in the shared vocabulary, ``scoring.parsing``.

This path stays importable for existing callers; new code imports ``scoring.parsing``.
"""

from scoring.parsing import (  # noqa: F401
    FoundJson,
    JsonObject,
    JudgeParse,
    find_json,
    parse_judge_output,
    strip_think,
    strip_think_outside_json,
    think_spans,
)
