"""The cognitive-distortion label set (cognitive_distortions_paper.txt §3.1 Table 1) as plain data.

Studies get it by default; a study may store its own label set instead. Pure Python: every app
(annotation, judging, analysis) imports it.
"""

NO_DISTORTION = "No Distortion"

# `name` is the label of Table 1; `prompt_label` is how the same label is spelled in the
# Appendix D list (the paper writes "All or Nothing Thinking" and "Magnification
# (Catastrophizing)" there), so the default prompts are word-for-word the paper's and a parser
# can map either spelling back to `name`.
DEFAULT_DISTORTIONS: list[dict[str, str]] = [
    {
        "name": "Emotional Reasoning",
        "prompt_label": "Emotional Reasoning",
        "description": "Assuming emotions reflect reality.",
        "example": '"I feel worthless, so I must be a failure."',
    },
    {
        "name": "Overgeneralization",
        "prompt_label": "Overgeneralization",
        "description": "Drawing broad conclusions from limited experiences.",
        "example": '"I failed this interview, I\'ll never get a job."',
    },
    {
        "name": "Mental Filter",
        "prompt_label": "Mental Filter",
        "description": "Focusing only on negative aspects.",
        "example": (
            '"Everyone said my presentation was good, but one person criticized it, so it must '
            'have been terrible."'
        ),
    },
    {
        "name": "Should Statements",
        "prompt_label": "Should Statements",
        "description": "Holding rigid expectations for oneself or others.",
        "example": '"I should always be calm and never get upset."',
    },
    {
        "name": "All-or-Nothing Thinking",
        "prompt_label": "All or Nothing Thinking",
        "description": "Viewing situations in extremes.",
        "example": "\"If I'm not the best, I'm a total failure.\"",
    },
    {
        "name": "Mind Reading",
        "prompt_label": "Mind Reading",
        "description": "Presuming negative judgments from others.",
        "example": "\"She didn't say hi, she must think I'm annoying.\"",
    },
    {
        "name": "Fortune Telling",
        "prompt_label": "Fortune Telling",
        "description": "Predicting negative outcomes with certainty.",
        "example": "\"There's no point in applying, I know I won't get accepted.\"",
    },
    {
        "name": "Magnification",
        "prompt_label": "Magnification (Catastrophizing)",
        "description": "Exaggerating potential problems.",
        "example": '"If I mess up this report, I\'ll lose my job and never recover."',
    },
    {
        "name": "Personalization",
        "prompt_label": "Personalization",
        "description": "Taking undue responsibility for external events.",
        "example": '"My friend is upset, it must be something I did wrong."',
    },
    {
        "name": "Labeling",
        "prompt_label": "Labeling",
        "description": "Defining oneself or others by single traits.",
        "example": '"I missed a deadline, I\'m so incompetent."',
    },
    # Table 1 caption: "'No Distortion' is included as an 11th category when no CD is present."
    # It is not in the prompt's list: the prompts name it in their own sentences.
    {
        "name": NO_DISTORTION,
        "prompt_label": NO_DISTORTION,
        "description": "No cognitive distortion is present.",
        "example": "",
    },
]

#: The single category for every out-of-list label [CD §3.2, Appendix E Table 6].
OTHERS = "Others"
