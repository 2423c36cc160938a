"""Secrets never leave the env in text it hands on: :func:`redact` is applied where tool responses, tool
errors and server frames are made.

A secret is the value of an environment variable whose name ends in ``KEY``, ``TOKEN``, ``SECRET`` or
``PASSWORD`` (``SERPAPI_API_KEY``, ``OPENAI_API_KEY``, ``HF_TOKEN``, ``ENVACE_SERVE_TOKEN``), at least
``MIN_CHARS`` long, as it is and URL-encoded, and the value of any key-like parameter of a URL's
query (``api_key=``, ``key=``, ``token=``, ``access_token=``, ``secret=``, ``password=``), whatever its value.
It costs about 10 ms per MiB of text.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote

REDACTED = "[redacted]"
MIN_CHARS = 8  # shorter values (flags, numbers) are not taken for secrets
#: How the name of a variable that holds a secret ends (compared in upper case).
SECRET_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD")
QUERY_SECRET = re.compile(r"(?<=[?&;])((?:serp_)?api_?key|key|access_token|token|secret|password)=[^&#\s'\"<>\\]+")
# what text must hold for QUERY_SECRET to match (found far faster than a regular expression scans)
QUERY_HINTS = ("key=", "token=", "secret=", "password=")


def secrets() -> set[str]:
    """The secret values in the environment now, each as it is and URL-encoded."""
    values = {os.environ[k] for k in os.environ if k.upper().endswith(SECRET_NAMES)}
    values = {v for v in values if len(v) >= MIN_CHARS}
    return values | {quote(v, safe="") for v in values}


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[redacted]`` (the same object when it holds none)."""
    for secret in sorted(secrets(), key=len, reverse=True):  # a longer secret before one inside it
        if secret in text:
            text = text.replace(secret, REDACTED)
    if any(hint in text for hint in QUERY_HINTS) and QUERY_SECRET.search(text):
        text = QUERY_SECRET.sub(rf"\1={REDACTED}", text)
    return text
