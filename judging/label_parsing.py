"""The distortion-label parser now lives in the shared vocabulary, ``scoring.label_parsing``.

This path stays importable for existing callers; new code imports ``scoring.label_parsing``.
"""

from scoring.distortions import OTHERS  # noqa: F401
from scoring.label_parsing import (  # noqa: F401
    RANKED_MAX_LABELS,
    LabelParse,
    LabelSpec,
    Scheme,
    label_key,
    parse_label_output,
)
