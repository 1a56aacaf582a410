"""Responders of the MentalBench-100k release (shared data README; paper Table 2 names).

Unknown model columns become responders whose family is their key; an admin can correct the
family in the admin before running a judge (it drives self-preference exclusion).
"""

KNOWN_RESPONDERS: dict[str, dict] = {
    "original": {"name": "Human reference", "family": "human", "is_reference": True},
    "claude": {"name": "Claude-3.5-Haiku", "family": "anthropic"},
    "gemini": {"name": "Gemini-2.0-Flash", "family": "google"},
    "gpt4o": {"name": "GPT-4o", "family": "openai-gpt4o"},
    "gpt4omini": {"name": "GPT-4o-Mini", "family": "openai-gpt4o-mini"},
    "llama_3": {"name": "LLaMA-3.1-8B", "family": "meta"},
    "qwen_2": {"name": "Qwen-2.5-7B", "family": "qwen"},
    "qwen_3": {"name": "Qwen-3-4B", "family": "qwen"},
    "ds_llama": {"name": "DeepSeek-LLaMA-8B", "family": "deepseek"},
    "ds_qwen": {"name": "DeepSeek-Qwen-7B", "family": "deepseek"},
}

# The paper's self-preference exclusions, keyed by a substring of the judge's name (DESIGN.md):
# each judge drops the responder of its own family; every judge keeps the other nine.
PAPER_JUDGES: list[tuple[str, dict]] = [
    ("claude", {"family": "anthropic", "excluded": ["claude"]}),
    ("gpt-4o", {"family": "openai-gpt4o", "excluded": ["gpt4o"]}),
    ("gemini", {"family": "google", "excluded": ["gemini"]}),
    ("o4-mini", {"family": "openai-o4-mini", "excluded": ["gpt4omini"]}),
]


def paper_judge_defaults(judge_name: str) -> dict:
    """Family and exclusions the paper used for a judge, matched on its name; {} if unknown."""
    lowered = judge_name.lower()
    for needle, defaults in PAPER_JUDGES:
        if needle in lowered:
            return defaults
    return {}
