"""The persona's chat engine for ``ovos-memory chat``: an ``ovos-chat-openai-plugin`` block, spoken directly.

We do not install ovos-chat-openai-plugin; its config block is read the same way (``api_url``,
``model``, ``key`` or ``api_key``, ``system_prompt``, ``allow_system_prompts``, ``max_tokens``,
``temperature``) and the endpoint is called through :class:`~ovos_memory_plugins._llm.client.ChatClient`.
Streaming (``"stream": true``, server-sent events) is read here; a server that ignores
``stream`` and answers with one JSON completion works too. A stream that ends without a chunk
carrying a ``finish_reason`` was cut (llama-cpp-python ends a stream it interrupts for another
request with a normal ``[DONE]``): :class:`StreamCut` says so, and the caller asks again.

As the plugin does, system messages are dropped unless ``allow_system_prompts`` is on; unlike
it, the CLI says so where the user sees it, because memory injected as a system message would
silently vanish.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .._llm.client import ChatClient, strip_think
from .._llm.traits import refuses_system_role, without_system_role
from ..errors import LLMError, LLMTimeout, LLMUnavailable
from ..messages import role_of

__all__ = ["OPENAI_HANDLERS", "ChatEndpoint", "StreamCut", "find_endpoint"]

#: Handler names whose block is an OpenAI-compatible endpoint.
OPENAI_HANDLERS = ("ovos-chat-openai-plugin", "ovos-solver-openai-plugin", "ovos-openai-plugin",
                   "ovos-solver-openai-persona-plugin")


class StreamCut(LLMError):
    """The stream ended before the server said the answer was finished."""


def find_endpoint(handlers: Sequence[str], blocks: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The first handler that is an OpenAI-compatible endpoint, with its block.

    A known OpenAI plugin name counts, and so does any handler whose block has an ``api_url``.
    """
    for name in handlers:
        block = blocks.get(name)
        block = dict(block) if isinstance(block, Mapping) else {}
        if name in OPENAI_HANDLERS or block.get("api_url"):
            return name, block
    return None


class ChatEndpoint:
    """One OpenAI-compatible chat endpoint configured like ovos-chat-openai-plugin.

    Args:
        block: the handler's config block from the persona file.
        timeout: seconds a request may take.
    """

    def __init__(self, block: Mapping[str, Any], timeout: float = 60.0):
        self.api_url = str(block.get("api_url") or "https://api.openai.com/v1").rstrip("/")
        self.model = str(block.get("model") or "")
        self.api_key = block.get("key") or block.get("api_key") or None
        self.system_prompt = str(block.get("system_prompt") or "")
        self.allow_system = bool(block.get("allow_system_prompts"))
        self.max_tokens = int(block.get("max_tokens") or 300)
        self.temperature = float(block.get("temperature", 0.5))
        # No circuit breaker delay: a person at a prompt retries when they choose to.
        # A person's chat goes as written: no "/no_think" for a model seen reasoning (memory work's).
        self.client = ChatClient(self.api_url, self.model, timeout, self.api_key, backoff=(0.0, 0.0),
                                 think_less=False)

    def prepare(self, messages: Sequence[Any]) -> tuple[list[dict[str, str]], int]:
        """The request's messages as role/content dicts, and how many system messages were dropped.

        Same rules as the plugin: without ``allow_system_prompts`` every system message goes;
        the block's own ``system_prompt`` leads (merged with the memory's when allowed).
        """
        out = [{"role": role_of(m), "content": m.content} for m in messages]
        dropped = 0
        if not self.allow_system:
            dropped = sum(1 for m in out if m["role"] == "system")
            out = [m for m in out if m["role"] != "system"]
        if self.system_prompt:
            if out and out[0]["role"] == "system":
                out[0] = {"role": "system", "content": self.system_prompt + "\n" + out[0]["content"]}
            else:
                out.insert(0, {"role": "system", "content": self.system_prompt})
        return out, dropped

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The whole reply, never empty (raises :class:`~ovos_memory_plugins.errors.LLMError`)."""
        text = self.client.complete(messages, max_tokens=self.max_tokens, temperature=self.temperature)
        if not text.strip():
            raise LLMError(f"{self.api_url}: the model's answer was empty")
        return text

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        """The reply in pieces as the server sends them (raises ``LLMError``; :class:`StreamCut`
        after the last piece when the server never said the answer was finished).

        Closing the generator (Ctrl-C in the caller) closes the connection.
        """
        model = self.client.resolve_model()
        sent = messages if self.client.traits.system_role else without_system_role(messages)
        body: dict[str, Any] = {"messages": sent, "max_tokens": self.max_tokens,
                                "temperature": self.temperature, "stream": True}
        if model:
            body["model"] = model
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.api_url + "/chat/completions", method="POST", headers=headers,
                                         data=json.dumps(body, ensure_ascii=False).encode("utf-8"))
        try:
            # The client's opener: it bypasses proxies for a server on this machine.
            resp = self.client._opener.open(request, timeout=self.client.timeout)
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace").strip()
            exc.close()
            if refuses_system_role(exc.code, detail) and sent is messages:
                yield self.complete(messages)  # the client finds out whether the system message is why
                return
            raise LLMError(f"{self.api_url}: HTTP {exc.code} {detail[:200]}") from None
        except urllib.error.URLError as exc:
            raise LLMUnavailable(f"{self.api_url}: {exc.reason}") from None
        except TimeoutError:
            raise LLMTimeout(f"{self.api_url}: no answer within {self.client.timeout:g}s") from None
        except OSError as exc:
            raise LLMUnavailable(f"{self.api_url}: {exc}") from None
        with resp:
            if "text/event-stream" not in (resp.headers.get("Content-Type") or ""):
                yield _whole_reply(resp.read())  # the server ignored "stream"
                return
            yield from _events(resp)


def _whole_reply(raw: bytes) -> str:
    try:
        data = json.loads(raw.decode("utf-8"))
        content = data["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"reply is not a chat completion: {raw[:120]!r}") from exc
    return strip_think(str(content))


def _events(resp: Any) -> Iterator[str]:
    """Text deltas from server-sent events (``data: {...}`` lines, ended by ``data: [DONE]``).

    A complete stream has a chunk with a ``finish_reason`` ("stop", "length"...); without one the
    stream was cut, whether it ended with ``[DONE]``, at the end of the connection or by an error.
    """
    finished = False
    try:
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                continue  # a broken frame: skip it, as the plugin does
            if isinstance(chunk, dict) and chunk.get("error"):
                raise LLMError(f"the server reported an error mid-answer: {chunk['error']}")
            for choice in (chunk.get("choices") or []) if isinstance(chunk, dict) else []:
                finished = finished or bool(choice.get("finish_reason"))
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield str(text)
    except TimeoutError:
        raise StreamCut("the stream stalled") from None
    except OSError as exc:
        raise StreamCut(f"the stream broke: {exc}") from None
    if not finished:
        raise StreamCut("the stream ended before the answer was finished")
