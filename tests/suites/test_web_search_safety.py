"""What BFCL's web search may reach and what it may say: fetches of public addresses only (loopback,
private, link-local and reserved ones refused, as resolved and on every redirect, unless allowed), bounded
in bytes and time, and no secret in any response or log line."""

from __future__ import annotations

import json
import socket
import time

import gymnasium as gym
import pytest
import requests
from web_pages import ADMIN_PAGE, MARKER, closed_port, web_pages

import envace_gym  # noqa: F401
from envace_gym.core.messages import format_tool_call
from envace_gym.env import EnvACEEnv
from envace_gym.redaction import REDACTED, redact
from envace_gym.suites.bfcl import web_search
from envace_gym.suites.bfcl.web_search import FetchRefused, WebSearchSuite, fetch, networks

KEY = "sk-serp-never-shown-0123456789"  # no "429" in it: bfcl-eval retries such errors for ever


def served_episode(env: gym.Env, *calls: tuple[str, dict]) -> list[tuple[str, dict]]:
    """Each call's tool response text and its call record, in one episode."""
    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    out = []
    for name, arguments in calls:
        obs, _, terminated, truncated, info = env.step(format_tool_call(name, arguments))
        assert not (terminated or truncated), info.get("error")  # a refusal never ends the episode
        out.append((obs["messages"][-1]["content"], info["tool_calls"][0]))
    return out


def test_a_fetch_of_loopback_private_or_metadata_addresses_is_refused_as_the_calls_error(monkeypatch):
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    suite = WebSearchSuite("web_search_base", backend="serpapi", serpapi_url=f"http://127.0.0.1:{closed_port()}")
    env = EnvACEEnv(suite, max_turns=None)
    with web_pages() as pages:
        kinds = {
            f"{pages}/admin": "loopback",
            pages.replace("127.0.0.1", "localhost") + "/admin": "loopback",
            f"http://[::1]:{pages.rsplit(':', 1)[1]}/admin": "loopback",
            "http://169.254.169.254/latest/meta-data/": "link-local",  # a cloud's metadata address
            "http://10.0.0.1/": "private",
            "http://[::ffff:127.0.0.1]/": "loopback",
            "http://100.64.0.1/": "non-global",
        }
        calls = [("fetch_url_content", {"url": url}) for url in kinds]
        for (text, record), (url, kind) in zip(served_episode(env, *calls), kinds.items()):
            assert record["error"] == "execution_error", url
            message = json.loads(text)["error"]["message"]
            assert f"a {kind} address; this env fetches public addresses only" in message, (url, message)
            assert MARKER not in text


def test_allow_fetch_lets_a_named_network_through_and_every_redirect_hop_is_checked(monkeypatch):
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    with web_pages() as pages:
        # gym.make's keyword, as `envace-gym serve --allow-fetch` gives it
        env = gym.make("EnvACE/bfcl-web-search-base-v0", allow_fetch=["127.0.0.0/8"])
        assert env.unwrapped.suite.backend == "serpapi"
        port = pages.rsplit(":", 1)[1]
        (page, record), (hop, _), (metadata, _) = served_episode(
            env,
            ("fetch_url_content", {"url": f"{pages}/admin"}),
            ("fetch_url_content", {"url": f"{pages}/to?{pages}/admin"}),
            ("fetch_url_content", {"url": f"{pages}/to?http://169.254.169.254/latest/meta-data/"}),
        )
        assert record["error"] is None and json.loads(page)["content"] == ADMIN_PAGE
        assert json.loads(hop)["content"] == ADMIN_PAGE  # a redirect within the allowed network
        assert "169.254.169.254 is a link-local address" in json.loads(metadata)["error"]["message"]
        narrow = networks("127.0.0.1/32")  # a redirect to another loopback address: refused at that hop
        with pytest.raises(FetchRefused, match="127.0.0.2 is a loopback address"):
            fetch(f"{pages}/to?http://127.0.0.2:{port}/admin", {}, narrow)
    with pytest.raises(ValueError, match="allow_fetch: 'localhost' is not a network"):
        gym.make("EnvACE/bfcl-web-search-base-v0", allow_fetch=["localhost"])


def test_a_fetch_connects_to_the_address_it_checked_so_a_rebound_name_cannot_swap_it(monkeypatch):
    answers = []

    def rebinding(host, port, *args, **kwargs):  # the name's first answer is allowed, every later one private
        address = host
        if host == "rebound.example":
            address = "127.0.0.1" if not answers else "10.0.0.1"
            answers.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with web_pages() as pages:
        port = pages.rsplit(":", 1)[1]
        response = fetch(f"http://rebound.example:{port}/admin", {}, networks("127.0.0.1/32"))
    assert response.text == ADMIN_PAGE and answers == ["127.0.0.1"]  # resolved once, and that address used


def test_a_fetch_reads_a_bounded_number_of_bytes_in_a_bounded_time(monkeypatch):
    monkeypatch.setattr(web_search, "FETCH_BYTES", 1000)
    monkeypatch.setattr(web_search, "FETCH_SECONDS", 1.0)
    loopback = networks("127.0.0.0/8")
    with web_pages() as pages:
        assert len(fetch(f"{pages}/big", {}, loopback).content) == 1000
        start = time.monotonic()
        with pytest.raises(requests.Timeout, match="within 1 s"):
            fetch(f"{pages}/slow", {}, loopback)
        assert time.monotonic() - start < 3


def test_the_search_key_is_in_no_response_record_or_log_line_when_the_transport_fails(monkeypatch, capfd):
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    suite = WebSearchSuite("web_search_base", backend="serpapi", serpapi_url=f"http://127.0.0.1:{closed_port()}")
    env = EnvACEEnv(suite, max_turns=None)
    env.reset(options={"task_id": env.task_ids[0]})
    obs, *_, info = env.step(format_tool_call("search_engine_query", {"keywords": "who"}))
    text = obs["messages"][-1]["content"]
    assert "Connection refused" in text or "Max retries" in text  # the transport's own error, quoted...
    assert "api_key=" + REDACTED in text  # ...with its key taken out
    out, err = capfd.readouterr()
    assert "Error from SerpAPI" in out  # bfcl-eval's own print
    for where in (text, json.dumps(info, default=str), json.dumps(env.unwrapped.episode.messages), out, err):
        assert KEY not in where


def test_redact_takes_out_secret_values_and_key_like_query_parameters(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "abc/def+ghi=jkl")
    monkeypatch.setenv("SHORT_TOKEN", "1234")  # too short to be taken for a secret
    text = "GET /s?q=x&api_key=anything&kl=wt; key abc/def+ghi=jkl, encoded abc%2Fdef%2Bghi%3Djkl; 1234"
    assert redact(text) == (f"GET /s?q=x&api_key={REDACTED}&kl=wt; key {REDACTED}, encoded {REDACTED}; 1234")
    plain = "nothing secret here: monkey=1"
    assert redact(plain) is plain
