"""One way to call an LLM, whoever serves it.

Providers:
- "openai": OpenAI's API through the official `openai` SDK (AsyncOpenAI).
- "openai_compatible" / "vllm": the same SDK with a configurable base_url — vLLM's
  OpenAI-compatible server, Gemini's OpenAI endpoint, any local server.
- "anthropic": Anthropic's Messages API through the official `anthropic` SDK (AsyncAnthropic).
- vLLM *offline* (in-process, GPU) through `generate_offline`, which imports vllm lazily.

Errors are mapped to three classes — RateLimited, TransientError, PermanentError — so callers
decide on retries without knowing which SDK was used. Retries happen in exactly one place,
`complete_with_retries` (see `make_client` for why the SDKs' own retries are off).

The package, one module per concern; callers import the names below from `judging.providers`:
- `config`: an endpoint's configuration, the answer (`Completion`), and the request fields
  both SDKs share;
- `errors`: the error classes, the SDK exceptions' mapping onto them, key redaction;
- `openai_adapter`, `anthropic_adapter`: each SDK's request and answer;
- `client`: the SDK client of an endpoint and one request (`complete`);
- `retries`: `complete_with_retries`, with an endpoint's shared rate limit;
- `offline`: vLLM in this process;
- `batch_api`: the providers' batch interfaces (batch mode), from the same request and answer
  functions as immediate mode.

Pure Python: no Django import here.
"""

from .client import complete, make_client
from .config import (
    STRUCTURED_OFF,
    STRUCTURED_OUTPUTS,
    Completion,
    EndpointConfig,
    OutputSchema,
    structured_output_check,
)
from .errors import (
    PermanentError,
    ProviderError,
    RateLimited,
    TransientError,
    VLLMNotInstalled,
    parse_retry_after,
    redact,
)
from .offline import generate_offline
from .openai_adapter import openai_structured
from .retries import backoff_delay, complete_with_retries

__all__ = [
    "STRUCTURED_OFF",
    "STRUCTURED_OUTPUTS",
    "Completion",
    "EndpointConfig",
    "OutputSchema",
    "PermanentError",
    "ProviderError",
    "RateLimited",
    "TransientError",
    "VLLMNotInstalled",
    "backoff_delay",
    "complete",
    "complete_with_retries",
    "generate_offline",
    "make_client",
    "openai_structured",
    "parse_retry_after",
    "redact",
    "structured_output_check",
]
