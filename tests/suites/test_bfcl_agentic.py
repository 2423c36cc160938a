"""BFCL v4's agentic categories (memory, web search) against bfcl-eval's own checker, backends and data."""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import os
import pickle
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import play

from envace_gym import agents
from envace_gym.agents.private_rehearsal import PrivateRehearsal
from envace_gym.core.limits import Limits
from envace_gym.core.messages import format_tool_call
from envace_gym.env import EnvACEEnv
from envace_gym.suites.bfcl import memory, web_search
from envace_gym.suites.bfcl.categories import MEMORY as MEMORY_CATEGORIES
from envace_gym.suites.bfcl.categories import WEB_SEARCH as WEB_SEARCH_CATEGORIES
from envace_gym.suites.bfcl.multi_turn import MAX_STEPS_PER_TURN

CATEGORIES = MEMORY_CATEGORIES + WEB_SEARCH_CATEGORIES

SLOW = {"memory_vector"}  # its first use imports sentence-transformers and loads MiniLM (about 10 s)


def each(categories):
    return [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in categories]


def category_suite(category):
    """What suites.bfcl.get_suite gives for an agentic category."""
    return (memory if category in MEMORY_CATEGORIES else web_search).category_suite(category)


def make(category, suite=None, **kwargs) -> EnvACEEnv:
    """The env as its registered id builds a multi-turn one: bfcl-eval's per-turn step limit, no turn limit."""
    kwargs.setdefault("max_turns", None)
    return EnvACEEnv(suite or category_suite(category), max_steps_per_turn=MAX_STEPS_PER_TURN, **kwargs)


def checker(text, answers) -> float:
    from bfcl_eval.eval_checker.agentic_eval.agentic_checker import agentic_checker

    return float(agentic_checker(text, answers)["valid"])


def first_of_each_scenario(suite, n):
    """The first ``n`` tasks of each memory scenario (of a web-search category: its first ``5 n``)."""
    if suite.category in WEB_SEARCH_CATEGORIES:
        return suite.task_ids()[: 5 * n]
    seen: dict[str, list] = {}
    for task_id in suite.task_ids():
        seen.setdefault(suite.task(task_id).data.raw["scenario"], []).append(task_id)
    return [t for ids in seen.values() for t in ids[:n]]


@pytest.mark.parametrize("category", each(CATEGORIES))
def test_oracle_scores_one(category):
    env = make(category)
    oracle = agents.load("oracle", env=env)
    for task_id in first_of_each_scenario(env.suite, 3):
        reward, info, infos = play(env, oracle, task_id=task_id)
        assert reward == 1.0 and info["ended_by"] == "user_stop", (task_id, info)
        assert info["reward_source"] == "world" and info["reward_info"]["valid"]
        assert all(c["error"] is None for i in infos for c in i["tool_calls"]), task_id
    if category in WEB_SEARCH_CATEGORIES:
        assert info["reward_info"]["backend"] == "offline corpus (stand-in)"


@pytest.mark.slow
@pytest.mark.parametrize("category", CATEGORIES)
def test_oracle_scores_one_on_every_task(category):
    env = make(category)
    oracle = agents.load("oracle", env=env)
    failed = [t for t in env.task_ids if play(env, oracle, task_id=t)[0] != 1.0]
    assert not failed and len(env.task_ids) == (155 if category in MEMORY_CATEGORIES else 100)


@pytest.mark.parametrize("category", each(CATEGORIES))
def test_real_rehearsed_and_shadow_dynamics(category):
    env = make(category)
    oracle = agents.load("oracle", env=env)
    task_id = env.task_ids[1]
    sources = {}
    for dynamics in ("real", "rehearsed", "shadow", "replay"):
        reward, info, infos = play(env, oracle, task_id=task_id, dynamics=dynamics)
        calls = [c for i in infos for c in i["tool_calls"]]
        assert reward == 1.0 and calls, dynamics
        sources[dynamics] = {c["source"] for c in calls}
        if dynamics == "shadow":  # the oracle rehearses what the real world answers, exactly
            assert all(c["fidelity"]["exact"] == 1.0 for c in calls)
    assert sources == {"real": {"real"}, "rehearsed": {"rehearsed"}, "shadow": {"real"}, "replay": {"replay"}}


@pytest.mark.parametrize("category", each(CATEGORIES))
@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])
def test_check_env(category, dynamics):
    check_env(make(category, dynamics=dynamics), skip_render_check=True)


MUTATIONS = {
    "first": lambda a, others: a[0],
    "truncated": lambda a, others: a[0][: max(1, len(a[0]) // 2)],
    "replaced": lambda a, others: others[0],
    "shouted": lambda a, others: a[0].upper(),
    "in a sentence": lambda a, others: f"I checked, and it is {a[-1]}, as far as I can tell.",
    "glued": lambda a, others: f"x{a[0]}x",
    "unknown": lambda a, others: "I do not know",
    "empty": lambda a, others: "",
}


@pytest.mark.parametrize("category", each(CATEGORIES))
def test_perturbed_answers_agree_with_bfcl_checker(category):
    """The env's reward equals bfcl-eval's agentic_checker on the final message, over perturbed oracle answers."""
    from envace_gym.suites.bfcl.agentic import final_answer

    env = make(category)
    suite, rng = env.suite, np.random.default_rng(0)
    task_ids = env.task_ids[:4]
    outcomes = []
    for task_id in task_ids:
        task = suite.task(task_id)
        others = [
            suite.task(t).data.answers[0] for t in env.task_ids if suite.task(t).data.answers != task.data.answers
        ]
        others = [others[int(rng.integers(len(others)))]]
        calls = [format_tool_call(c["name"], c["arguments"]) for c in suite.grader.gold_calls(task)]
        for kind, mutate in MUTATIONS.items():
            text = final_answer(mutate(task.data.answers, others), "perturbed")
            reward, info, _ = play(env, Script(calls + [text]), task_id=task_id)
            expected = checker(text, task.data.answers)
            assert reward == expected, (task_id, kind, text, info["reward_info"])
            outcomes.append(reward)
    # never answering: bfcl-eval finds no final message (its runner's agentic:no_last_message), the env 0
    reward, info, _ = play(env, Script([calls[0]] * (MAX_STEPS_PER_TURN + 2)), task_id=task_ids[0])
    assert reward == 0.0 and info["ended_by"] == "max_steps"
    verdict = suite.grader.evaluate(env.episode.task, env.episode.world, env.episode)
    assert verdict[0] == 0.0 and verdict[1]["error_type"] == "agentic:no_last_message"
    assert len(outcomes) >= 20 and 0.0 in outcomes and 1.0 in outcomes


def test_answers_match_ignoring_case_and_punctuation_but_not_spaces():
    """As docs/suites/bfcl.md says and bfcl-eval's checker does (its docstring says spaces are ignored too)."""
    from envace_gym.suites.bfcl.agentic import final_answer

    env = make("memory_kv")
    suite = env.suite
    task = next(suite.task(t) for t in env.task_ids if all(" " in a for a in suite.task(t).data.answers))
    calls = [format_tool_call(c["name"], c["arguments"]) for c in suite.grader.gold_calls(task)]
    answer = task.data.answers[0]
    for text, expected in [(f"({answer.upper().replace(' ', ' -_')}.)", 1.0), (answer.replace(" ", ""), 0.0)]:
        reward, info, _ = play(env, Script([*calls, final_answer(text, "reworded")]), task_id=task.id)
        assert reward == expected == checker(final_answer(text, "reworded"), task.data.answers), (text, info)


class Script:
    """Plays a fixed list of act actions."""

    def __init__(self, actions):
        self.actions = list(actions)

    def act(self, obs):
        return self.actions.pop(0)


# --- memory ------------------------------------------------------------------------------------------

WRITES = {  # a write to each backend, and what a read of it shows afterwards
    "memory_kv": (("archival_memory_add", {"key": "fresh_fact", "value": "The sky is green."}), "fresh_fact"),
    "memory_vector": (("archival_memory_add", {"text": "The sky is green."}), "The sky is green."),
    "memory_rec_sum": (("memory_append", {"text": "The sky is green."}), "The sky is green."),
}
READS = {
    "memory_kv": ("archival_memory_list_keys", {}),
    "memory_vector": ("archival_memory_retrieve_all", {}),
    "memory_rec_sum": ("memory_retrieve", {}),
}


def write(world, category):
    (name, arguments), _ = WRITES[category]
    assert "error" not in world.execute(name, arguments).content


def holds(world, category) -> bool:
    return WRITES[category][1] in world.execute(*READS[category]).content


@pytest.mark.parametrize("category", each(MEMORY_CATEGORIES))
def test_each_world_and_fork_owns_its_memory(category):
    suite = category_suite(category)
    task = suite.task(suite.task_ids()[0])
    a, b = suite.new_world(task), suite.new_world(task)
    assert a.folder.name != b.folder.name and a.api is not b.api
    write(a, category)
    assert holds(a, category) and not holds(b, category) and not holds(suite.new_world(task), category)
    fork = a.fork()
    assert fork.folder.name != a.folder.name and str(fork.api.snapshot_folder).startswith(fork.folder.name)
    assert holds(fork, category)  # a fork starts from its world's state...
    fork.execute(*CLEARS[category])
    assert not holds(fork, category) and holds(a, category)  # ...and changes only its own
    write(b.fork(), category)
    assert not holds(b, category)
    folder = a.folder.name
    a.close()
    assert not os.path.exists(folder)


CLEARS = {
    "memory_kv": ("archival_memory_clear", {}),
    "memory_vector": ("archival_memory_clear", {}),
    "memory_rec_sum": ("memory_clear", {}),
}


@pytest.mark.parametrize("category", each(MEMORY_CATEGORIES))
def test_episodes_forks_and_copies_see_their_own_writes(category):
    (name, arguments), shown = WRITES[category]
    read = format_tool_call(*READS[category])
    env, other = make(category), make(category)
    task_id = env.task_ids[0]
    env.reset(options={"task_id": task_id})
    other.reset(options={"task_id": task_id})
    obs, *_ = env.step(format_tool_call(name, arguments))
    assert "error" not in obs["messages"][-1]["content"]
    assert shown in env.step(read)[0]["messages"][-1]["content"]
    assert shown not in other.step(read)[0]["messages"][-1]["content"]
    copied = pickle.loads(pickle.dumps(env))  # its world is rebuilt by replaying the episode's calls
    assert shown in copied.step(read)[0]["messages"][-1]["content"]
    fork = env.fork()
    assert fork.episode.world is not env.episode.world
    fork.step(format_tool_call(*CLEARS[category]))
    assert shown not in fork.step(read)[0]["messages"][-1]["content"]
    assert shown in env.step(read)[0]["messages"][-1]["content"]


@pytest.mark.parametrize("category", each(MEMORY_CATEGORIES))
def test_nothing_is_written_outside_the_worlds_temporary_folders(category, tmp_path, monkeypatch):
    suite = category_suite(category)
    env = make(category)
    task_id = env.task_ids[1]
    play(env, agents.load("oracle", env=env), task_id=task_id)  # loads the backend and the scenario first
    home, cwd, temp = (tmp_path / d for d in ("home", "cwd", "temp"))
    for d in (home, cwd, temp):
        d.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    (name, arguments), _ = WRITES[category]
    env.reset(options={"task_id": task_id})
    env.step(format_tool_call(name, arguments))
    fork = env.fork(dynamics="shadow")
    fork.step(format_tool_call(name, arguments))
    assert len([p for p in temp.iterdir() if p.name.startswith("envace-bfcl-memory-")]) == 2
    for e in (env, fork):
        oracle = agents.load("oracle", env=e)
        obs, done = e.observation(), False
        while not done:
            obs, reward, terminated, truncated, _ = e.step(oracle.act(obs))
            done = terminated or truncated
        assert reward == 1.0
    suite.new_world(suite.task(task_id)).close()
    del env, fork, oracle, e
    gc.collect()
    assert not any(home.iterdir()) and not any(cwd.iterdir()) and not any(temp.iterdir())


@pytest.mark.parametrize("category", each(MEMORY_CATEGORIES))
def test_prerequisites_are_replayed_through_the_backends_own_flush_and_load(category):
    suite = category_suite(category)
    for task_id in first_of_each_scenario(suite, 1):
        task = suite.task(task_id)
        scenario = task.data.raw["scenario"]
        saved = json.loads(suite.snapshot(scenario))  # the backend's own snapshot format
        assert set(saved) == ({"memory"} if category == "memory_rec_sum" else {"core_memory", "archival_memory"})
        world = suite.new_world(task)
        assert world.api.test_id == task_id and world.api.scenario == scenario
        shown = suite.system_prompt(task)
        passages = list(suite.passages(scenario))
        if category == "memory_rec_sum":  # all of memory is in context, as bfcl-eval shows it
            assert all(p in shown for p in passages) and world.api.memory == "".join(p + "\n" for p in passages)
        else:  # core memory is empty (bfcl-eval shows an empty vector store as "{}"); archival holds the passages
            core = world.api.core_memory if category == "memory_kv" else world.api.core_memory._store
            assert core == {} and world.api._dump_core_memory_to_context() in shown
            read = world.execute(*READS[category]).content
            held = suite.passages(scenario).values() if category == "memory_kv" else passages
            assert all(json.dumps(p)[1:-1] in read for p in held)
        assert shown.endswith(task.data.system) and task.data.source in passages


@pytest.mark.parametrize("category", each(MEMORY_CATEGORIES))
def test_system_prompt_is_bfcl_runners(category):
    from bfcl_eval.model_handler.utils import add_memory_instruction_system_prompt

    suite = category_suite(category)
    for task_id in first_of_each_scenario(suite, 1):
        task = suite.task(task_id)
        question = add_memory_instruction_system_prompt(
            copy.deepcopy(task.data.raw["question"]), category, task.data.raw["scenario"], suite.new_world(task).api
        )
        assert question[0][0] == {"role": "system", "content": suite.system_prompt(task)}
        assert question[0][1] == {"role": "user", "content": task.data.question}


def test_the_vector_suite_loads_its_encoder_only_to_make_a_world():
    """Listing and counting its tasks (``eval``'s coverage of a benchmark not run) leaves the encoder
    unloaded; the backend class is found when a world is made."""
    from envace_gym.suites.bfcl.memory import MemorySuite

    suite = MemorySuite("memory_vector")
    assert suite.task_ids() and "api_class" not in vars(suite)


@pytest.mark.slow
def test_vector_backend_embeds_with_the_real_minilm():
    from sentence_transformers import SentenceTransformer

    from envace_gym.suites.bfcl.memory import ENCODER_SHA256, encoder_dir, vector_module

    module = vector_module()
    encoder = module.ENCODER
    assert type(encoder) is SentenceTransformer and module.ENCODER_DIM == 384
    assert encoder[0].auto_model.name_or_path == str(encoder_dir())
    assert encoder[0].auto_model.config.num_hidden_layers == 6
    weights = (encoder_dir() / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest() == ENCODER_SHA256  # the hub's all-MiniLM-L6-v2 weights
    store = module.VectorStore(max_size=5, max_entry_length=300)
    for text in ("I'm 35 years old.", "I like strawberry matcha lattes.", "My kitchen counter is 38 square feet."):
        store.add(text)
    assert store.retrieve("How old am I?", 1)[0]["text"] == "I'm 35 years old."
    assert store.retrieve("What drink do I enjoy?", 1)[0]["text"] == "I like strawberry matcha lattes."


def test_private_rehearsal_on_memory():
    env = make("memory_kv")
    agent = PrivateRehearsal(agents.load("oracle", env=env), env, budget=2, world_model=agents.load("oracle", env=env))
    reward, info, _ = play(env, agent, task_id=env.task_ids[2])
    assert reward == 1.0


# --- web search -------------------------------------------------------------------------------------

PAGES = {
    "/page/answer": "<html><head><title>Da Hong Pao</title><style>p {}</style></head>"
    "<body><h1>Richest in China</h1><p>The answer is <b>Zhang Yiming</b>.</p><script>x()</script></body></html>",
    "/page/other": "<html><body><p>Nothing here.</p></body></html>",
}


class FakeSerpAPI(BaseHTTPRequestHandler):
    """SerpAPI's search endpoint (its DuckDuckGo engine's JSON) and two pages, on the loopback."""

    requests: list = []

    def do_GET(self):
        url = urlparse(self.path)
        type(self).requests.append((url.path, parse_qs(url.query)))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        if url.path == "/search" and parse_qs(url.query)["q"] == ["hang"]:
            time.sleep(3)
            return
        if url.path == "/search":
            query = parse_qs(url.query)
            reply = {
                "search_metadata": {"status": "Success"},
                "search_parameters": {"engine": query["engine"][0], "q": query["q"][0], "kl": query["kl"][0]},
                "organic_results": [
                    {"position": i + 1, "title": t, "link": base + p, "snippet": s, "favicon": base + "/icon"}
                    for i, (t, p, s) in enumerate(
                        [
                            ("Richest billionaires", "/page/answer", "Zhang Yiming tops..."),
                            ("Other", "/page/other", "-"),
                        ]
                    )
                ],
            }
            body, kind, status = json.dumps(reply).encode(), "application/json", 200
        elif url.path in PAGES:
            body, kind, status = PAGES[url.path].encode(), "text/html; charset=utf-8", 200
        else:
            body, kind, status = b"missing", "text/plain", 404
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def serpapi():
    FakeSerpAPI.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeSerpAPI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("category", WEB_SEARCH_CATEGORIES)
def test_web_search_runs_bfcl_code_against_a_loopback_serpapi(category, serpapi, monkeypatch):
    from envace_gym.suites.bfcl.web_search import WebSearchSuite

    monkeypatch.setenv("SERPAPI_API_KEY", "test-key")
    suite = WebSearchSuite(category, serpapi_url=serpapi, allow_fetch=["127.0.0.0/8"])  # its pages are loopback ones
    assert suite.backend == "serpapi" and not suite.private_worlds
    env = make(category, suite=pickle.loads(pickle.dumps(suite)))
    task_id = env.task_ids[0]
    env.reset(options={"task_id": task_id})
    obs, *_ = env.step(format_tool_call("search_engine_query", {"keywords": "richest China", "max_results": 1}))
    (path, query), *_ = FakeSerpAPI.requests
    assert path == "/search" and query["engine"] == ["duckduckgo"] and query["q"] == ["richest China"]
    assert query["kl"] == ["wt-wt"] and query["api_key"] == ["test-key"] and query["output"] == ["json"]
    results = json.loads(obs["messages"][-1]["content"])["result"]  # bfcl-eval's text of its list
    assert f"'href': '{serpapi}/page/answer'" in results and "Other" not in results  # max_results=1
    assert ("Zhang Yiming tops" in results) == (category == "web_search_base")  # no_snippet hides the snippet
    contents = {}
    for mode in ("raw", "markdown", "truncate"):
        obs, *_ = env.step(format_tool_call("fetch_url_content", {"url": f"{serpapi}/page/answer", "mode": mode}))
        contents[mode] = json.loads(obs["messages"][-1]["content"])["content"]
    assert contents["raw"] == PAGES["/page/answer"]
    assert "# Richest in China" in contents["markdown"] and "**Zhang Yiming**" in contents["markdown"]
    assert contents["truncate"] == "Da Hong Pao\nRichest in China\nThe answer is\nZhang Yiming\n."
    obs, *_ = env.step(format_tool_call("fetch_url_content", {"url": f"{serpapi}/page/gone"}))
    assert "404 Client Error" in json.loads(obs["messages"][-1]["content"])["error"]
    _, reward, terminated, _, info = env.step("{'answer': 'Zhang Yiming', 'context': 'the page says so'}")
    assert terminated and reward == 1.0 and info["reward_info"]["backend"] == "bfcl-eval WebSearchAPI on SerpAPI"
    # outside a world's call, bfcl-eval's client is serpapi's, unrouted
    from envace_gym.suites.bfcl.web_search import web_module

    assert web_module().GoogleSearch({"engine": "duckduckgo"}).construct_url()[0] == "https://serpapi.com/search"


def test_a_hanging_serpapi_call_is_cut_at_the_call_budget(serpapi):
    from envace_gym.suites.bfcl.web_search import WebSearchSuite

    suite = WebSearchSuite("web_search_base", backend="serpapi", serpapi_url=serpapi)
    env = make("web_search_base", suite=suite, limits=Limits(call_seconds=0.5))
    env.reset(options={"task_id": env.task_ids[0]})
    start = time.monotonic()
    obs, *_, info = env.step(format_tool_call("search_engine_query", {"keywords": "hang"}))
    assert info["tool_calls"][0]["error"] == "limit_exceeded" and time.monotonic() - start < 2.5
    assert suite.isolates("search_engine_query", {}) and not category_suite("web_search_base").isolates("x", {})


def test_backend_follows_the_serpapi_key(monkeypatch):
    from envace_gym.suites.bfcl.web_search import WebSearchSuite

    monkeypatch.setenv("SERPAPI_API_KEY", "k")
    assert WebSearchSuite("web_search_base").backend == "serpapi"
    monkeypatch.delenv("SERPAPI_API_KEY")
    assert WebSearchSuite("web_search_base").backend == "offline"


def test_offline_corpus_comes_from_bfcl_data_only():
    from envace_gym.suites.bfcl.web_search import CORPUS, Corpus, build_corpus

    results, pages = build_corpus()
    assert json.loads((CORPUS / "results.json").read_text()) == results
    assert json.loads((CORPUS / "pages.json").read_text()) == pages
    corpus, suite = Corpus.load(), category_suite("web_search_no_snippet")
    for task_id in suite.task_ids():  # each question's answer page holds its possible answers
        (_, search), (_, fetch) = suite.oracle_calls(suite.task(task_id))
        page = corpus.fetch(fetch["url"])
        assert page.status_code == 200 and checker(page.text, suite.task(task_id).data.answers) == 1.0
        found = json.loads(corpus.search({"q": search["keywords"]}).text)["organic_results"]
        assert found[0]["link"] == fetch["url"]
