"""A client for any OpenAI-compatible server, with timeouts, retries and clear errors."""

from __future__ import annotations

from contextlib import contextmanager

import openai


class ModelServerError(RuntimeError):
    """The model server could not be reached or answered with an error."""


class ChatEndpoint:
    """``openai.OpenAI`` bound to one server and model.

    The client retries connection errors, timeouts, 429 and 5xx answers with
    exponential backoff (``max_retries``); what still fails is raised as a
    :class:`ModelServerError` that names the URL.
    """

    def __init__(self, base_url: str, model: str, api_key: str = "EMPTY",
                 timeout: float = 60.0, max_retries: int = 3):
        self.base_url, self.model = base_url, model
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key,
                                    timeout=timeout, max_retries=max_retries)

    @contextmanager
    def errors(self):
        try:
            yield
        except openai.APIConnectionError as e:
            raise ModelServerError(f"cannot reach the model server at {self.base_url}: {e}") from e
        except openai.APIStatusError as e:
            raise ModelServerError(
                f"the model server at {self.base_url} answered {e.status_code}: {e.message}") from e

    def _first(self, response):
        if not response.choices:
            raise ModelServerError(f"the model server at {self.base_url} returned no choices")
        return response.choices[0]

    def chat(self, messages: list[dict], **kwargs):
        """One chat completion; returns the first choice's message."""
        with self.errors():
            response = self.client.chat.completions.create(model=self.model, messages=messages, **kwargs)
        return self._first(response).message

    def complete(self, prompt: str | list[int], **kwargs):
        """One text completion (``prompt`` may be token ids); returns the first choice."""
        with self.errors():
            response = self.client.completions.create(model=self.model, prompt=prompt, **kwargs)
        return self._first(response)

    def post(self, path: str, body: dict | None = None) -> None:
        """POST ``body`` to ``path`` at the server's root (beside ``/v1``)."""
        root = str(self.client.base_url).rstrip("/").removesuffix("/v1")
        with self.errors():
            self.client.post(f"{root}{path}", body=body or {}, cast_to=object)
