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
world has one. Outside a world's call both behave exactly as the originals.
"""

from __future__ import annotations

import contextvars
import copy
import html
import importlib
import json
import os
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import requests
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

from envace_gym.episode import Task
from envace_gym.suites.bfcl import categories, source
from envace_gym.suites.bfcl.agentic import AgenticSuite
from envace_gym.suites.bfcl.multi_turn import BFCLWorld

SERPAPI_URL = "https://serpapi.com"
OFFLINE_HOST = "bfcl-offline.invalid"  # a reserved name that never resolves: the corpus' answer pages
STAND_IN = "offline corpus (stand-in)"
CORPUS = Path(__file__).parent / "web_corpus"

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


@dataclass(frozen=True)
class Route:
    """Where a world's calls go: a SerpAPI address and the web, or a corpus for both."""

    serpapi_url: str = SERPAPI_URL
    corpus: Corpus | None = None


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
            return super().get_response(path)

    class RoutedRequests:
        """The web module's ``requests``, whose ``get`` reads the calling world's corpus."""

        def __getattr__(self, name):
            return getattr(requests, name)

        def get(self, url, *args, **kwargs):
            route = ROUTE.get()
            if route is not None and route.corpus is not None:
                return route.corpus.fetch(url)
            return requests.get(url, *args, **kwargs)

    module.GoogleSearch, module.requests = RoutedSearch, RoutedRequests()
    return module


class WebWorld(BFCLWorld):
    """One episode's ``WebSearchAPI``, its calls routed to the suite's backend."""

    def __init__(self, api: Any, owners: dict[str, str], route: Route):
        super().__init__({"WebSearchAPI": api}, owners)
        self.route = route

    def execute(self, name: str, arguments: dict, requestor: str = "assistant"):
        token = ROUTE.set(self.route)
        try:
            return super().execute(name, arguments, requestor)
        finally:
            ROUTE.reset(token)

    def fork(self) -> WebWorld:
        return WebWorld(copy.deepcopy(self.instances["WebSearchAPI"]), self.owners, self.route)


class WebSearchSuite(AgenticSuite):
    """One web-search category. ``backend``: ``"serpapi"`` (SerpAPI at ``serpapi_url``, then the web),
    ``"offline"`` (the corpus), or None: SerpAPI when ``SERPAPI_API_KEY`` is set, else the corpus."""

    prefix = "web_search"

    def __reduce__(self):  # pickled by reference where it is its category's process-wide suite
        if self.default:
            return category_suite, (self.category,)
        return WebSearchSuite, (self.category, self.backend, self.route.serpapi_url)

    def __init__(self, category: str, backend: str | None = None, serpapi_url: str = SERPAPI_URL):
        if category not in CATEGORIES:
            raise ValueError(f"unknown BFCL web-search category {category!r}; choose from {CATEGORIES}")
        if backend not in (None, "serpapi", "offline"):
            raise ValueError(f"backend must be 'serpapi', 'offline' or None, not {backend!r}")
        super().__init__(category)
        from bfcl_eval.utils import populate_initial_settings_for_web_search_test_cases

        populate_initial_settings_for_web_search_test_cases([e.raw for e in self._entries.values()])
        self.default = backend is None and serpapi_url == SERPAPI_URL
        self.backend = backend or ("serpapi" if os.environ.get("SERPAPI_API_KEY") else "offline")
        self.route = Route(serpapi_url, Corpus.load() if self.backend == "offline" else None)
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


@cache
def category_suite(category: str) -> WebSearchSuite:
    """The process-wide suite of one web-search category (its backend chosen by ``SERPAPI_API_KEY`` then)."""
    return WebSearchSuite(category)
