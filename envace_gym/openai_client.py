"""A client for any OpenAI-compatible server: every call bounded in time and size, every failure
one :class:`ModelServerError` that names the server."""

from __future__ import annotations

import math
import threading
import time
import urllib.parse
from concurrent.futures import Future

import httpx
import pydantic

RETRIED_STATUS = (408, 409, 429)  # and every 5xx


class ModelServerError(RuntimeError):
    """The model server could not be reached, or answered with an error or a malformed reply."""


class _Transient(ModelServerError):
    """A failure worth retrying: no connection, a timeout, 408, 409, 429 or 5xx."""


class _Reply(pydantic.BaseModel, extra="allow"):
    """The part of a reply that envace-gym reads; the rest is kept as extras."""


class Function(_Reply):
    name: str
    arguments: str | None = None


class ToolCall(_Reply):
    id: str = ""
    function: Function


class Message(_Reply):
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(_Reply):
    message: Message


class ChatReply(_Reply):
    choices: list[ChatChoice] = pydantic.Field(min_length=1)


class Logprobs(_Reply):
    token_logprobs: list[float] = []


class CompletionChoice(_Reply):
    text: str
    logprobs: Logprobs | None = None


class CompletionReply(_Reply):
    choices: list[CompletionChoice] = pydantic.Field(min_length=1)


class ModelCard(_Reply):
    id: str


class ModelList(_Reply):
    data: list[ModelCard]


class ChatEndpoint:
    """One model on an OpenAI-compatible server at ``base_url`` (``http://HOST:PORT/v1``).

    A call answers or raises :class:`ModelServerError` within ``timeout`` seconds in all:
    attempts, their backoff and a server that hangs or trickles bytes included. Failures
    worth retrying (no connection, a timeout, 408, 409, 429, 5xx) are retried up to
    ``max_retries`` times with exponential backoff while time is left. A reply over
    ``max_reply_bytes``, or one that is not the expected JSON, is refused.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        timeout: float = 60.0,
        max_retries: int = 2,
        max_reply_bytes: int = 4 << 20,
    ):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"a base URL is http(s)://HOST[:PORT]/..., got {base_url!r}")
        if not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if max_retries < 0 or max_reply_bytes < 1:
            raise ValueError(
                f"max_retries must be 0 or more and max_reply_bytes positive, got "
                f"{max_retries!r} and {max_reply_bytes!r}"
            )
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.timeout, self.max_retries, self.max_reply_bytes = timeout, max_retries, max_reply_bytes

    def chat(self, messages: list[dict], **kwargs) -> Message:
        """One chat completion; returns the first choice's message."""
        body = {"model": self.model, "messages": messages, **kwargs}
        return self._call("/chat/completions", ChatReply, body).choices[0].message

    def complete(self, prompt: str | list[int], **kwargs) -> CompletionChoice:
        """One text completion (``prompt`` may be token ids); returns the first choice."""
        body = {"model": self.model, "prompt": prompt, **kwargs}
        return self._call("/completions", CompletionReply, body).choices[0]

    def models(self) -> list[str]:
        """The ids of the models the server serves."""
        return [card.id for card in self._call("/models", ModelList).data]

    def post(self, path: str, body: dict | None = None) -> None:
        """POST ``body`` to ``path`` at the server's root (beside ``/v1``); the reply is not read."""
        self._call(path, None, body or {}, root=True)

    def _call(self, path: str, reply: type[_Reply] | None, body: dict | None = None, root: bool = False):
        """``reply`` read from the answer to ``path`` (GET without a body, else POST), within the deadline."""
        base = self.base_url.rstrip("/")
        url = (base.removesuffix("/v1") if root else base) + path
        deadline = time.monotonic() + self.timeout
        answer: Future = Future()

        def attempts():  # in a thread of its own, so that nothing the server does outlasts the deadline
            try:
                answer.set_result(self._attempts(url, body, deadline))
            except BaseException as e:
                answer.set_exception(e)

        threading.Thread(target=attempts, daemon=True).start()
        try:
            data = answer.result(timeout=self.timeout)
        except TimeoutError:
            raise self._timed_out() from None
        if reply is None:
            return None
        try:
            return reply.model_validate_json(data)
        except pydantic.ValidationError as e:
            error = e.errors()[0]
            where = ".".join(map(str, error["loc"])) or "the body"
            raise ModelServerError(
                f"the model server at {self.base_url} sent a malformed reply to {path} ({where}: {error['msg']})"
            ) from None

    def _attempts(self, url: str, body: dict | None, deadline: float) -> bytes:
        attempt = 0
        while True:
            try:
                return self._attempt(url, body, deadline)
            except _Transient:
                backoff = min(0.5 * 2**attempt, 8.0)
                if attempt == self.max_retries or time.monotonic() + backoff >= deadline:
                    raise
            time.sleep(backoff)
            attempt += 1

    def _attempt(self, url: str, body: dict | None, deadline: float) -> bytes:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        method = "GET" if body is None else "POST"
        try:
            with httpx.stream(
                method, url, json=body, headers=headers, timeout=max(deadline - time.monotonic(), 0.01)
            ) as response:
                status, content = response.status_code, self._read(response, deadline)
        except httpx.TimeoutException:
            raise self._timed_out() from None
        except httpx.HTTPError as e:
            raise _Transient(f"cannot reach the model server at {self.base_url}: {e}") from None
        if status >= 300:
            kind = _Transient if status in RETRIED_STATUS or status >= 500 else ModelServerError
            detail = " ".join(content[:500].decode(errors="replace").split())
            raise kind(f"the model server at {self.base_url} answered {status}: {detail}")
        return content

    def _read(self, response: httpx.Response, deadline: float) -> bytes:
        """The body, refused past ``max_reply_bytes`` or the deadline."""
        limit = self.max_reply_bytes
        too_large = ModelServerError(f"the model server at {self.base_url} sent a reply over {limit} bytes")
        if int(response.headers.get("content-length") or 0) > limit:  # declared: refused before reading
            raise too_large
        chunks, size = [], 0
        for chunk in response.iter_raw(1 << 16):
            size += len(chunk)
            if size > limit:
                raise too_large
            if time.monotonic() > deadline:
                raise self._timed_out()
            chunks.append(chunk)
        return b"".join(chunks)

    def _timed_out(self) -> _Transient:
        return _Transient(f"the model server at {self.base_url} did not answer within {self.timeout:g} s")
