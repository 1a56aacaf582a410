"""vLLM *offline*: generation in this process on a GPU; vllm is imported on first use."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from .config import Completion, Message, normalise_finish
from .errors import VLLMNotInstalled


def generate_offline(
    model: str,
    prompts: Sequence[str] | Sequence[Sequence[Message]],
    *,
    temperature: float,
    max_tokens: int,
    seed: int | None = None,
    llm_kwargs: Mapping[str, Any] | None = None,
) -> list[Completion]:
    """Generate with vLLM in this process (needs the `vllm` package and a GPU).

    `prompts` are raw strings (sent as is) or chat conversations — lists of {"role", "content"}
    dicts — which go through the model's chat template via `LLM.chat`. One Completion per
    prompt, in order. latency_s is the batch's wall time divided evenly: vLLM batches the prompts
    together, so there is no per-prompt latency.
    """
    try:
        import vllm  # lazy: the platform installs and runs without vllm or a GPU
    except ImportError:
        raise VLLMNotInstalled(
            "vLLM offline generation needs the 'vllm' package and a GPU, and vllm is not "
            "installed here: install the 'gpu' extra (pip install 'mentalbench[gpu]') on a GPU "
            "machine, or serve the model with `vllm serve` and use provider 'vllm' with a base_url"
        ) from None
    if not prompts:
        return []
    sampling = vllm.SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
    llm = vllm.LLM(model=model, **dict(llm_kwargs or {}))
    started = time.perf_counter()
    if isinstance(prompts[0], str):
        outputs = llm.generate(list(prompts), sampling)
    else:
        outputs = llm.chat([list(conversation) for conversation in prompts], sampling)
    share = (time.perf_counter() - started) / len(outputs) if outputs else 0.0
    completions = []
    for output in outputs:
        best = output.outputs[0]
        finish = normalise_finish(best.finish_reason)
        completions.append(
            Completion(
                text=best.text,
                input_tokens=len(output.prompt_token_ids or []),
                output_tokens=len(best.token_ids),
                finish_reason=finish,
                raw_finish_reason=best.finish_reason,
                truncated=finish == "length",
                latency_s=share,
                model=model,
                request_id=str(output.request_id),
            )
        )
    return completions
