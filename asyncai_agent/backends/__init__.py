"""Model backends, chosen by ``--model KIND:NAME``."""

from __future__ import annotations

from pathlib import Path

from asyncai_agent.backends.base import MAX_TOKENS, TIMEOUT_SECONDS, Backend, BackendError

__all__ = ["MAX_TOKENS", "TIMEOUT_SECONDS", "Backend", "BackendError", "make_backend"]

_ACCEPTED = "openai:MODEL, anthropic:MODEL or scripted:FILE"


def make_backend(spec: str, *, base_url: str | None = None) -> Backend:
    """Build the backend ``spec`` names. Raises BackendError with the accepted forms."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise BackendError(f"--model expects {_ACCEPTED}, got {spec!r}")
    if kind == "openai":
        from asyncai_agent.backends.openai import OpenAIBackend

        return OpenAIBackend(rest, base_url=base_url)
    if kind == "anthropic":
        from asyncai_agent.backends.anthropic import AnthropicBackend

        return AnthropicBackend(rest, base_url=base_url)
    if kind == "scripted":
        from asyncai_agent.backends.scripted import ScriptedBackend

        return ScriptedBackend.from_file(Path(rest))
    raise BackendError(f"--model expects {_ACCEPTED}; unknown backend {kind!r} in {spec!r}")
