"""BFCL v4's web-search categories on bfcl-eval's ``WebSearchAPI`` (SerpAPI's DuckDuckGo engine and
``fetch_url_content``), online or over an offline corpus.

With ``SERPAPI_API_KEY`` set, calls reach SerpAPI and the web as in bfcl-eval. Without it,
the same code runs with its HTTP answered from a recorded corpus (``web_corpus/``) built
only from bfcl-eval's questions and possible answers: for each hop of an answer, a result
titled with the hop's sub-question at the hop's source address, and for each question a
result titled with the question whose page holds the possible answers. That corpus is a
stand-in for the web, and rewards say so (``reward_info["backend"]``).

Either way bfcl-eval's code does the requests, parsing, snippet hiding and HTML
conversion; only its transport is routed, per world: the web module's ``GoogleSearch``
(serpapi's client) is a subclass that sends the search to the world's SerpAPI address or
corpus, and its ``requests`` is a stand-in whose ``get`` fetches from the corpus when the
world has one, else the page through :func:`fetch`. Outside a world's call both behave exactly as the
originals.

A server fetches what its client's model names, so :func:`fetch` reaches public addresses only: a
loopback, link-local, private, reserved or otherwise non-global address is refused, as resolved, on every
redirect (followed here, each hop checked), and the connection goes to the address checked, so that a
name rebound between the check and the request cannot swap it. ``allow_fetch`` (the suite's keyword,
``gym.make``'s and ``envace-gym serve --allow-fetch``) names networks that are allowed anyway. A fetch
reads at most :data:`FETCH_BYTES` in :data:`FETCH_SECONDS`. A refusal is the call's ``execution_error``;
no secret (the SerpAPI key a failed search's URL holds) is in any response (:mod:`envace_gym.redaction`).
"""

from __future__ import annotations

import contextvars
import copy
import html
import importlib
import ipaddress
import json
import os
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests
import urllib3
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

from envace_gym.core.episode import Task
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.response import Response, redacted
from envace_gym.redaction import redact
from envace_gym.suites.bfcl import categories, source
from envace_gym.suites.bfcl.agentic import AgenticSuite
from envace_gym.suites.bfcl.multi_turn import BFCLWorld

SERPAPI_URL = "https://serpapi.com"
OFFLINE_HOST = "bfcl-offline.invalid"  # a reserved name that never resolves: the corpus' answer pages
STAND_IN = "offline corpus (stand-in)"
CORPUS = Path(__file__).parent / "web_corpus"
FETCH_BYTES = 2 << 20  # a fetched page's bytes, decoded, read at most (the rest is cut)
FETCH_SECONDS = 20.0  # one whole fetch, redirects included (bfcl-eval's own timeout)
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)

CATEGORIES = categories.WEB_SEARCH


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def build_corpus() -> tuple[list[dict], dict[str, dict]]:
    """Search results and pages from bfcl-eval's web-search questions and possible answers only."""
    questions = {e["id"]: e for e in source._read_jsonl(source.DATA / f"{source.VERSION}_web_search.json")}
    results: list[dict] = []
    pages: dict[str, dict] = {}
    for truth in source._read_jsonl(source.DATA / "possible_answer" / f"{source.VERSION}_web_search.json"):
        for hop in truth["source"]:
            fact = f"{hop['subquestion']}: {hop['answer']}."
            result = {"title": hop["subquestion"], "link": hop["source"], "snippet": fact}
            if result not in results:
                results.append(result)
            page = pages.setdefault(page_key(hop["source"]), {"title": hop["subquestion"], "paragraphs": []})
            if fact not in page["paragraphs"]:
                page["paragraphs"].append(fact)
        question = " ".join(m["content"] for m in questions[truth["id"]]["question"][0] if m["role"] == "user")
        answer = f"Answer: {'; '.join(truth['ground_truth'])}."
        results.append({"title": question, "link": answer_url(truth["id"]), "snippet": answer})
        pages[answer_url(truth["id"])] = {"title": question, "paragraphs": [answer]}
    return results, pages


def write_corpus() -> None:
    """Rewrite ``web_corpus/`` from the installed bfcl-eval (a test checks that it is current)."""
    results, pages = build_corpus()
    CORPUS.mkdir(exist_ok=True)
    for name, value in (("results.json", results), ("pages.json", pages)):
        (CORPUS / name).write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n")


def answer_url(question_id: str) -> str:
    return f"https://{OFFLINE_HOST}/{question_id}"


def page_key(url: str) -> str:
    return url.split("#", 1)[0]


def _response(url: str, status: int, body: str, content_type: str) -> requests.Response:
    response = requests.Response()
    response.status_code, response.url, response.encoding = status, url, "utf-8"
    response.reason = "OK" if status == 200 else "Not Found"
    response.headers["Content-Type"] = content_type
    response._content = body.encode()
    return response


class Corpus:
    """The recorded corpus: SerpAPI's JSON for a search (BM25 over titles and snippets), HTML for a page."""

    def __init__(self, results: list[dict], pages: dict[str, dict]):
        self.results, self.pages = results, pages

    @classmethod
    def load(cls) -> Corpus:
        return cls(*(json.loads((CORPUS / n).read_text()) for n in ("results.json", "pages.json")))

    @cached_property
    def index(self):
        from rank_bm25 import BM25Plus  # bfcl-eval's own ranking dependency (its kv memory)

        return BM25Plus([_words(f"{r['title']} {r['snippet']}") for r in self.results])

    def search(self, params: dict) -> requests.Response:
        query = set(_words(str(params.get("q") or "")))
        scores = self.index.get_scores(list(query)) if query else []
        ranked = sorted(
            (i for i, r in enumerate(self.results) if query & set(_words(f"{r['title']} {r['snippet']}"))),
            key=lambda i: -scores[i],
        )[:10]
        reply: dict[str, Any] = {
            "search_metadata": {"status": "Success", "source": STAND_IN},
            "search_parameters": {k: params.get(k) for k in ("engine", "q", "kl")},
        }
        if ranked:
            reply["organic_results"] = [
                {"position": n + 1, **{k: self.results[i][k] for k in ("title", "link", "snippet")}}
                for n, i in enumerate(ranked)
            ]
        else:
            reply["error"] = "DuckDuckGo hasn't returned any results for this query."
        return _response(SERPAPI_URL + "/search.json", 200, json.dumps(reply), "application/json")

    def fetch(self, url: str) -> requests.Response:
        page = self.pages.get(page_key(url))
        if page is None:
            return _response(url, 404, "<html><body><h1>404 Not Found</h1></body></html>", "text/html")
        title = html.escape(page["title"])
        body = "".join(f"<p>{html.escape(p)}</p>" for p in page["paragraphs"])
        text = f"<html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>"
        return _response(url, 200, text, "text/html; charset=utf-8")


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def networks(cidrs: str | Iterable[str]) -> tuple[Network, ...]:
    """``allow_fetch``'s networks (one CIDR or several, such as ``10.0.0.0/8``); a bad one is a ValueError."""
    out = []
    for cidr in [cidrs] if isinstance(cidrs, str) else cidrs:
        try:
            out.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except (ValueError, AttributeError):
            raise ValueError(f"allow_fetch: {cidr!r} is not a network such as 10.0.0.0/8 or 127.0.0.1/32") from None
    return tuple(out)


def forbidden(address: Address, allowed: tuple[Network, ...] = ()) -> str | None:
    """What kind of address a fetch may not reach ``address`` is (``loopback``, ``private``, ...), or None."""
    if any(address in network for network in allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour or (address.teredo and address.teredo[1])
        if inner:  # an IPv4 address inside an IPv6 one is judged as itself
            return forbidden(inner, allowed)
    for kind in ("loopback", "link_local", "private", "reserved", "multicast", "unspecified"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "non-global"


class FetchRefused(BaseException):
    """A fetch the env does not make. A BaseException, so that bfcl-eval's catch-all in
    ``fetch_url_content`` lets it through to :meth:`WebWorld.execute`, which answers it as the call's error."""


def _checked_address(host: str, port: int, allowed: tuple[Network, ...]) -> str:
    """The address ``host`` resolves to, every one of its addresses checked."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise requests.ConnectionError(f"cannot resolve {host}: {e}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not addresses:
        raise requests.ConnectionError(f"{host} has no address")
    for address in addresses:
        kind = forbidden(address, allowed)
        if kind:
            where = host if host == str(address) else f"{host} ({address})"
            raise FetchRefused(f"refused: {where} is a {kind} address; this env fetches public addresses only")
    return str(addresses[0])


def fetch(url: str, headers: dict, allowed: tuple[Network, ...] = ()) -> requests.Response:
    """GET ``url`` as ``requests.get`` would, reaching public addresses only (and ``allowed`` networks):
    each hop's name resolved and checked, and connected to at the address checked; redirects followed here,
    at most :data:`MAX_REDIRECTS`; at most :data:`FETCH_BYTES` read in :data:`FETCH_SECONDS`."""
    deadline = time.monotonic() + FETCH_SECONDS
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchRefused(f"refused: {url[:200]!r} is not an http or https URL with a host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = _checked_address(parts.hostname, port, allowed)
        response = _get(parts, parts.hostname, port, address, headers, deadline)
        location = response.headers.get("Location")
        if response.status_code not in REDIRECTS or not location:
            return response
        url = urljoin(url, location)
    raise FetchRefused(f"refused: more than {MAX_REDIRECTS} redirects")


def _get(parts, host: str, port: int, address: str, headers: dict, deadline: float) -> requests.Response:
    """One GET of ``parts`` (a split URL) from ``address``, ``host``'s name kept in ``Host`` and for TLS."""
    https = parts.scheme == "https"
    left = max(deadline - time.monotonic(), 0.01)
    options: dict[str, Any] = {"timeout": urllib3.Timeout(connect=left, read=left), "retries": False, "maxsize": 1}
    if https:
        pool: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(
            address, port, server_hostname=host, assert_hostname=host, **options
        )
    else:
        pool = urllib3.HTTPConnectionPool(address, port, **options)
    name = f"[{host}]" if ":" in host else host
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    late = requests.Timeout(f"the page did not arrive within {FETCH_SECONDS:g} s")
    with pool:
        try:
            raw = pool.urlopen(
                "GET",
                target,
                headers={**headers, "Host": name if parts.port is None else f"{name}:{port}"},
                redirect=False,
                assert_same_host=False,
                preload_content=False,
            )
            body = bytearray()
            # read1: what has arrived, at most one read of the socket, so that a page trickled a byte at a
            # time meets the deadline (a whole-chunk read would wait for its 64 KB)
            while chunk := raw.read1(1 << 16, decode_content=True):
                body += chunk
                if len(body) >= FETCH_BYTES:
                    del body[FETCH_BYTES:]
                    break
                if time.monotonic() > deadline:
                    raise late
            raw.release_conn()
        except urllib3.exceptions.TimeoutError:
            raise late from None
    response = requests.Response()
    response.status_code, response.reason = raw.status, raw.reason or ""
    response.url = urlunsplit(parts)
    response.headers.update(raw.headers)
    response.encoding = requests.utils.get_encoding_from_headers(response.headers)
    response._content = bytes(body)
    return response


@dataclass(frozen=True)
class Route:
    """Where a world's calls go: a SerpAPI address and the web (the networks a fetch may reach besides
    public ones), or a corpus for both."""

    serpapi_url: str = SERPAPI_URL
    corpus: Corpus | None = None
    allow_fetch: tuple[Network, ...] = ()


ROUTE: contextvars.ContextVar[Route | None] = contextvars.ContextVar("envace_bfcl_web_route", default=None)


@cache
def web_module():
    """bfcl-eval's web module with its transport routed by :data:`ROUTE` (installed once)."""
    module = importlib.import_module(CLASS_FILE_PATH_MAPPING["WebSearchAPI"])

    class RoutedSearch(module.GoogleSearch):
        """serpapi's client, sent to the calling world's SerpAPI address or corpus."""

        def get_response(self, path="/search"):
            route = ROUTE.get()
            if route is not None and route.corpus is not None:
                return route.corpus.search(self.construct_url(path)[1])
            if route is not None:
                self.BACKEND = route.serpapi_url
            try:
                return super().get_response(path)
            except Exception as e:  # its text (bfcl-eval answers and prints it) quotes the URL, key and all
                raise RuntimeError(redact(str(e))) from None

    class RoutedRequests:
        """The web module's ``requests``, whose ``get`` reads the calling world's corpus."""

        def __getattr__(self, name):
            return getattr(requests, name)

        def get(self, url, *args, **kwargs):
            route = ROUTE.get()
            if route is None:
                return requests.get(url, *args, **kwargs)
            if route.corpus is not None:
                return route.corpus.fetch(url)
            return fetch(url, kwargs.get("headers") or {}, route.allow_fetch)

    module.GoogleSearch, module.requests = RoutedSearch, RoutedRequests()
    return module


class WebWorld(BFCLWorld):
    """One episode's ``WebSearchAPI``, its calls routed to the suite's backend."""

    def __init__(self, api: Any, owners: dict[str, str], route: Route):
        super().__init__({"WebSearchAPI": api}, owners)
        self.route = route

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        token = ROUTE.set(self.route)
        try:
            return redacted(super().execute(name, arguments, requestor))
        except FetchRefused as e:
            return Response(error=ToolError(ErrorCode.EXECUTION_ERROR, f"{name}: {e}"), native=f"Error: {e}")
        finally:
            ROUTE.reset(token)

    def fork(self) -> WebWorld:
        return WebWorld(copy.deepcopy(self.instances["WebSearchAPI"]), self.owners, self.route)


class WebSearchSuite(AgenticSuite):
    """One web-search category. ``backend``: ``"serpapi"`` (SerpAPI at ``serpapi_url``, then the web),
    ``"offline"`` (the corpus), or None: SerpAPI when ``SERPAPI_API_KEY`` is set, else the corpus.
    ``allow_fetch``: networks (CIDRs) ``fetch_url_content`` may reach besides public addresses."""

    prefix = "web_search"

    def __reduce__(self):  # pickled by reference where it is its category's process-wide suite
        if self.default:
            return category_suite, (self.category, self.allow_fetch)
        return WebSearchSuite, (self.category, self.backend, self.route.serpapi_url, self.allow_fetch)

    def __init__(
        self,
        category: str,
        backend: str | None = None,
        serpapi_url: str = SERPAPI_URL,
        allow_fetch: str | Iterable[str] = (),
    ):
        if category not in CATEGORIES:
            raise ValueError(f"unknown BFCL web-search category {category!r}; choose from {CATEGORIES}")
        if backend not in (None, "serpapi", "offline"):
            raise ValueError(f"backend must be 'serpapi', 'offline' or None, not {backend!r}")
        super().__init__(category)
        from bfcl_eval.utils import populate_initial_settings_for_web_search_test_cases

        populate_initial_settings_for_web_search_test_cases([e.raw for e in self._entries.values()])
        self.default = backend is None and serpapi_url == SERPAPI_URL
        self.backend = backend or ("serpapi" if os.environ.get("SERPAPI_API_KEY") else "offline")
        self.allow_fetch = (allow_fetch,) if isinstance(allow_fetch, str) else tuple(allow_fetch)
        self.route = Route(
            serpapi_url, Corpus.load() if self.backend == "offline" else None, networks(self.allow_fetch)
        )
        self.private_worlds = self.backend == "offline"  # SerpAPI calls reach outside this process
        self.stateless_tools = frozenset(self._owners)  # WebSearchAPI keeps no state between calls
        self.api_class = web_module().WebSearchAPI

    def isolates(self, name: str, arguments: dict) -> bool:
        """A SerpAPI or web call runs in a child killed at the call budget (bfcl-eval's client retries
        a rate limit for ever, sleeping up to 120 s); the corpus answers in process."""
        return self.backend == "serpapi"

    def new_world(self, task: Task) -> WebWorld:
        api = self.api_class()
        api._load_scenario(copy.deepcopy(task.data.raw["initial_config"]["WebSearchAPI"]))
        return WebWorld(api, self._owners, self.route)

    def backend_label(self) -> str:
        return STAND_IN if self.backend == "offline" else "bfcl-eval WebSearchAPI on SerpAPI"

    def oracle_calls(self, task: Task) -> list[tuple[str, dict]]:
        """A search for the question, then the page that answers it: the corpus' answer page offline,
        else the source the ground truth cites for its last hop."""
        entry = task.data
        url = (
            answer_url(task.id.replace(self.category, "web_search", 1))
            if self.route.corpus is not None
            else entry.source[-1]["source"]
        )
        return [
            ("search_engine_query", {"keywords": entry.question}),
            ("fetch_url_content", {"url": url, "mode": "truncate"}),
        ]


def category_suite(category: str, allow_fetch: str | Iterable[str] = ()) -> WebSearchSuite:
    """The process-wide suite of one web-search category and ``allow_fetch`` networks (its backend chosen
    by ``SERPAPI_API_KEY`` then): ``gym.make("EnvACE/bfcl-web-search-base-v0", allow_fetch=[...])``'s."""
    return _category_suite(category, (allow_fetch,) if isinstance(allow_fetch, str) else tuple(allow_fetch))


@cache
def _category_suite(category: str, allow_fetch: tuple[str, ...]) -> WebSearchSuite:
    return WebSearchSuite(category, allow_fetch=allow_fetch)
