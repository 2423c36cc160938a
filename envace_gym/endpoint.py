"""A chat client for any OpenAI-compatible server, with timeouts, retries and clear errors."""

from __future__ import annotations

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

    def chat(self, messages: list[dict], **kwargs):
        """One chat completion; returns the first choice's message."""
        try:
            response = self.client.chat.completions.create(model=self.model, messages=messages, **kwargs)
        except openai.APIConnectionError as e:
            raise ModelServerError(f"cannot reach the model server at {self.base_url}: {e}") from e
        except openai.APIStatusError as e:
            raise ModelServerError(
                f"the model server at {self.base_url} answered {e.status_code}: {e.message}") from e
        if not response.choices:
            raise ModelServerError(f"the model server at {self.base_url} returned no choices")
        return response.choices[0].message
