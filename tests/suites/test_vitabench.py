"""VitaBench suites: tool responses equal to VitaBench's own environment, per-world isolation of its
class registries, whole offline episodes, no-gold refusals, hostile actions, the rubric judge
sending exactly the prompts of VitaBench's own evaluator, a judge served here (SmolLM2), and the
OTA and cross-domain tasks from a checkout that holds their files."""

import json
import os
import pickle
import re
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

import gymnasium as gym
import pytest
from fakes import FakeChatServer
from helpers import play
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import SUPPORT
from typer.testing import CliRunner
from vitabench_reference import LATEST, normalized, resolve, vita_messages

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.base import Agent
from envace_gym.cli import app
from envace_gym.core.messages import format_tool_call
from envace_gym.evaluation import EvalResults
from envace_gym.openai_client import ChatEndpoint
from envace_gym.play.compare import compare_calls

DELIVERY, INSTORE = "EnvACE/vitabench-delivery-v0", "EnvACE/vitabench-instore-v0"
ANY_ORDER_ID = re.compile(r"\bO[TIO][0-9a-f]{10}\b")  # delivery, in-store and OTA order ids
STOP = "Your order is placed and paid. Anything else? ###STOP###"


def later(task, hours: float) -> str:
    now = datetime.strptime(task.data.environment["time"], "%Y-%m-%d %H:%M:%S")
    return (now + timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")


def delivery_calls(task) -> list:
    env = task.data.environment
    store = next(iter(env["stores"].values()))
    product, user, address = store["products"][0], env["user_id"], env["location"][0]["address"]
    order = {
        "user_id": user,
        "store_id": store["store_id"],
        "product_ids": [product["product_id"]],
        "product_cnts": [2],
        "address": address,
        "dispatch_time": later(task, 1),
    }
    latest = {"order_id": LATEST}
    return [
        ("delivery_store_search_recommand", {"keywords": [store["name"].split()[0]]}),
        ("delivery_product_search_recommand", {"keywords": [product["name"]]}),
        ("get_delivery_store_info", {"store_id": store["store_id"]}),
        ("get_delivery_store_info", {"store_id": "S_missing"}),  # raises: an error
        ("get_delivery_product_info", {"product_id": product["product_id"]}),
        ("address_to_longitude_latitude", {"address": address}),
        ("create_delivery_order", {**order, "user_id": "U_someone_else"}),  # refused by an assertion
        ("create_delivery_order", order),
        ("get_delivery_order_detail", latest),
        ("pay_delivery_order", latest),
        ("pay_delivery_order", latest),
        ("cancel_delivery_order", latest),
        ("cancel_delivery_order", latest),
        ("get_delivery_order_status", latest),
        ("search_delivery_orders", {"user_id": user, "status": "cancelled"}),
        ("get_delivery_product_info", {"product_id": product["product_id"]}),  # the ordered copy now
        ("get_delivery_order_detail", {"order_id": "OT_missing"}),
        ("weather", {"address": address, "date_start": later(task, 0)[:10], "date_end": later(task, 24)[:10]}),
        (
            "get_nearby",
            {"longitude": store["location"]["longitude"], "latitude": store["location"]["latitude"], "range": 3000.0},
        ),
        ("get_user_all_orders", {}),
        ("delivery_distance_to_time", {"distance": 1234.5}),
        ("get_holiday_date", {"year": "2025", "holiday_name": "Dragon Boat"}),
    ]


def instore_calls(task) -> list:
    env = task.data.environment
    shop = next(iter(env["shops"].values()))
    product, user = shop["products"][0], env["user_id"]
    visit = {"user_id": user, "shop_id": shop["shop_id"], "time": later(task, 20), "customer_count": 2}
    return [
        ("instore_shop_search_recommend", {"keywords": [shop["shop_name"]]}),
        ("instore_product_search_recommend", {"keywords": [product["name"]]}),
        (
            "create_instore_product_order",
            {"user_id": user, "shop_id": shop["shop_id"], "product_id": product["product_id"], "quantity": 2},
        ),
        ("pay_instore_order", {"order_id": LATEST}),
        ("pay_instore_order", {"order_id": LATEST}),
        ("instore_cancel_order", {"order_id": LATEST}),
        ("instore_cancel_order", {"order_id": LATEST}),
        ("instore_product_search_recommend", {"keywords": [product["name"]]}),  # its quantity changed
        ("instore_reservation", visit),
        ("instore_modify_reservation", {"reservation_id": LATEST, "time": later(task, 22), "customer_count": 3}),
        ("instore_cancel_reservation", {"reservation_id": LATEST}),
        ("instore_book", visit),
        ("get_instore_orders", {"user_id": user}),
        ("get_instore_reservations", {"user_id": user}),
        ("get_instore_books", {"user_id": user}),
        ("search_instore_reservation", {"user_id": user}),
        ("instore_cancel_order", {"order_id": "OI_missing"}),
        ("get_user_all_orders", {}),
    ]


def make(env_id, **kwargs):
    return gym.make(env_id, **kwargs).unwrapped


def start(env, task_id):
    env.reset(seed=0, options={"task_id": task_id})
    return env


def call(env, name, arguments) -> dict:
    """One call through the env's step; VitaBench's text for it and whether it was an error."""
    earlier = [c.native for c in env.episode.calls]
    env.step(format_tool_call(name, resolve(arguments, earlier)))
    record = env.episode.calls[-1]
    assert record.source == "real", (name, record.content)
    return {"content": record.native, "error": record.error is not None}


def lone(env_id, task_id, calls) -> list[dict]:
    env = start(make(env_id), task_id)
    return [call(env, *c) for c in calls]


@pytest.fixture(scope="module")
def jobs():
    out = []
    for env_id, domain, make_calls in ((DELIVERY, "delivery", delivery_calls), (INSTORE, "instore", instore_calls)):
        suite = make(env_id).suite
        for task_id in suite.task_ids(None)[:2]:
            out.append((env_id, domain, task_id, make_calls(suite.task(task_id))))
    return out


@pytest.fixture(scope="module")
def vitabench_answers(jobs):
    """VitaBench's own environment, in a process with no envace-gym code, on the same calls."""
    script = SUPPORT / "vitabench_reference.py"
    done = subprocess.run(
        [sys.executable, str(script)],
        input=json.dumps([j[1:] for j in jobs]),
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_every_tool_response_equals_vitabench_own_environment(jobs, vitabench_answers):
    for (env_id, _, task_id, calls), theirs in zip(jobs, vitabench_answers):
        ours = lone(env_id, task_id, calls)
        ours_seen, theirs_seen = {}, {}
        for (name, _), a, b in zip(calls, ours, theirs, strict=True):
            assert normalized(a["content"], ours_seen) == normalized(b["content"], theirs_seen), (task_id, name)
            assert a["error"] == b["error"], (task_id, name)
        texts = [a["content"] for a in ours]
        assert any(a["error"] for a in ours) and "<id0>" in normalized(" ".join(texts), {})
        assert any("cancel" in t and "already" in t for t in texts)  # the second cancellation is refused


def test_responses_are_json_objects_with_vitabench_text():
    env = start(make(DELIVERY), "10711001")
    env.step(format_tool_call("delivery_distance_to_time", {"distance": 1000}))
    assert json.loads(env.episode.messages[-1]["content"]) == {"result": "32.0"}
    env.step(format_tool_call("get_delivery_store_info", {"store_id": "nope"}))
    assert json.loads(env.episode.messages[-1]["content"])["error"]["code"] == "execution_error"


def test_interleaved_episodes_of_different_tasks_and_forks_answer_as_a_lone_episode(jobs):
    plans = [(env_id, task_id, calls) for env_id, _, task_id, calls in jobs[:3]]  # two delivery, one in-store
    alone = [lone(*plan) for plan in plans]
    envs = [start(make(env_id), task_id) for env_id, task_id, _ in plans]
    got = [[] for _ in plans]
    fork, fork_got, cut = None, [], 8  # the fork is taken right after the first task's order is placed
    for step in range(max(len(c) for _, _, c in plans)):
        for i, (env, (_, _, calls)) in enumerate(zip(envs, plans)):
            if step < len(calls):
                if i == 1:  # another thread: VitaBench's tables are per thread, a world's are not
                    worker = threading.Thread(target=lambda args=(env, *calls[step]): got[1].append(call(*args)))
                    worker.start()
                    worker.join()
                else:
                    got[i].append(call(env, *calls[step]))
            if i == 0 and step == cut - 1:
                fork = env.fork()
            if i == 0 and fork is not None and step >= cut:
                fork_got.append(call(fork, *calls[step]))
    assert got == alone
    assert fork_got == alone[0][cut:]


def test_a_pickled_episode_goes_on_as_the_original(jobs):
    env_id, _, task_id, calls = jobs[0]
    env = start(make(env_id), task_id)
    for c in calls[:9]:  # past placing the order
        call(env, *c)
    copy = pickle.loads(pickle.dumps(env))
    assert [call(copy, *c) for c in calls[9:]] == [call(env, *c) for c in calls[9:]]


class Scripted(Agent):
    """Plays fixed act actions in order (the latest id of earlier tool messages for ``$latest``) and
    rehearses every call with one fixed response."""

    def __init__(self, actions, rehearsal='{"result": "done"}'):
        self.actions, self.rehearsal = list(actions), rehearsal

    def act(self, obs):
        if obs["role"] == "rehearse":
            return self.rehearsal
        ids = ANY_ORDER_ID.findall(" ".join(m["content"] for m in obs["messages"] if m["role"] == "tool"))
        return self.actions.pop(0).replace(LATEST, ids[-1] if ids else LATEST)


class OrdersAndPays(Scripted):
    """On any delivery task: searches, orders two of the first store's first product, pays and closes, in
    one judge window (``--agent test_vitabench:OrdersAndPays``)."""

    def __init__(self, env):
        super().__init__([])
        self.env, self.episode = env, None

    def act(self, obs):
        episode = self.env.unwrapped.episode
        if episode is not self.episode:
            calls = delivery_calls(episode.task)
            self.episode, self.actions = episode, [format_tool_call(*calls[i]) for i in (0, 7, 9)] + [STOP]
        return super().act(obs)


def episode_actions(suite, task_id):
    calls = delivery_calls(suite.task(task_id))
    return [
        format_tool_call(*calls[0]),
        format_tool_call(*calls[7]),
        "What time is your surgery?",
        format_tool_call(*calls[9]),
        STOP,
    ]


RUBRICS_ALL_MET = json.dumps(
    [{"rubric_idx": f"rubric_{i}", "justification": "seen", "meetExpectation": True} for i in range(20)]
)


@pytest.mark.parametrize("dynamics", ["real", "rehearsed", "shadow"])
def test_a_whole_offline_episode_with_the_scripted_user(server, dynamics):
    url, _ = server
    FakeChatServer.replies = [{"role": "assistant", "content": RUBRICS_ALL_MET}] * 10
    env = gym.make(DELIVERY, dynamics=dynamics, reward=f"vitabench:judge@{url}")
    suite = env.unwrapped.suite
    reward, info, infos = play(env, Scripted(episode_actions(suite, "10711001")), task_id="10711001")
    assert info["ended_by"] == "user_stop" and info["reward_source"] == "vitabench" and "error" not in info
    assert reward == 1.0 and info["reward_info"]["rubrics_met"] == 1.0
    sources = {c["source"] for i in infos for c in i["tool_calls"]}
    assert sources == {"rehearsed" if dynamics == "rehearsed" else "real"}
    user_turns = [m["content"] for m in env.unwrapped.episode.messages if m["role"] == "user"]
    assert user_turns[0] == suite.task("10711001").data.instructions.strip()
    assert user_turns[1].startswith("You have surgery at 1:30 PM")  # answered from the instructions
    if dynamics == "shadow":
        assert all(c["fidelity"] is not None for i in infos for c in i["tool_calls"])


def test_the_llm_user_is_vitabench_user_simulator_on_a_server(server):
    url, _ = server
    FakeChatServer.replies = [
        {"role": "assistant", "content": "Mild rice noodles, please."},
        {"role": "assistant", "content": "That is all. ###STOP###"},
    ]
    env = gym.make(DELIVERY, user="llm", user_kwargs={"base_url": url, "model": "user"}, reward=lambda e: 0.0)
    _, info, _ = play(env, Scripted(["Which noodles would you like?"]), task_id="10711001")
    from vita.user.user_simulator import UserSimulator  # importable once a VitaBench env is made

    task = env.unwrapped.suite.task("10711001").data
    prompt = UserSimulator(
        persona=str(task.user_scenario.user_profile), instructions=str(task.instructions), language="english"
    ).system_prompt
    first, second = (r["messages"] for r in FakeChatServer.requests)
    assert first == [{"role": "system", "content": prompt}, {"role": "user", "content": "Hello, how can I help you?"}]
    assert second[-2:] == [
        {"role": "assistant", "content": "Mild rice noodles, please."},
        {"role": "user", "content": "Which noodles would you like?"},
    ]
    assert info["ended_by"] == "user_stop"


def test_without_gold_the_oracle_actions_and_gold_replay_refuse_and_compare_works(monkeypatch):
    env = make(DELIVERY)
    obs, _ = env.reset(options={"task_id": "10711001"})
    with pytest.raises(ValueError, match="has no gold calls"):
        agents.load("oracle", env=env).act(obs)
    with pytest.raises(ValueError, match="has no gold calls"):
        env.reset(options={"task_id": "10711001", "dynamics": "replay"})
    for reward in ("actions", "actions_share", "world"):
        _, info, _ = play(gym.make(DELIVERY, reward=reward), Scripted([STOP]), task_id="10711001")
        assert "has no gold calls" in info["error"]
    monkeypatch.delenv("VITABENCH_JUDGE", raising=False)
    _, info, _ = play(gym.make(DELIVERY, dynamics="rehearsed"), Scripted([STOP]), task_id="10711001")
    assert info["reward_source"] == "vitabench" and "VITABENCH_JUDGE" in info["error"]
    recorded = [{"name": "delivery_distance_to_time", "arguments": {"distance": 5}, "response": '{"result": "25.0"}'}]
    _, info, infos = play(
        gym.make(DELIVERY, dynamics="replay", recordings=recorded),
        Scripted([format_tool_call("delivery_distance_to_time", {"distance": 5}), STOP]),
        task_id="10711001",
    )
    assert infos[1]["tool_calls"][0]["source"] == "replay"
    # shadow episodes of a scripted actor, rehearsed by the oracle's world model: every call exact
    shadow = gym.make(DELIVERY)
    actor = Scripted(episode_actions(env.suite, "10711001"))
    records = list(compare_calls(shadow, actor, agents.load("oracle", env=shadow), ["10711001"]))
    assert len(records) == 3 and all(r["exact"] for r in records)


def _verdict(met: list[int], fenced: bool = False) -> str:
    text = json.dumps(
        [{"rubric_idx": f"rubric_{i}", "justification": f"rubric {i} seen", "meetExpectation": True} for i in met]
    )
    return f"```json\n{text[:-1]},]\n```" if fenced else text  # the fenced one has a trailing comma too


@pytest.fixture(scope="module")
def recorded():
    """A finished real episode of 16 messages after the system prompt: two judge windows."""
    env = gym.make(DELIVERY, reward=lambda episode: 0.0)
    actions = episode_actions(env.unwrapped.suite, "10711001")
    actions[-1:-1] = [format_tool_call(*c) for c in delivery_calls(env.unwrapped.suite.task("10711001"))[10:13]]
    play(env, Scripted(actions), task_id="10711001")
    return env.unwrapped.episode


def vitabench_evaluation(monkeypatch, episode, replies):
    """VitaBench's own evaluator on the episode, its LLM a fake that captures the messages it is sent."""
    from vita.data_model.message import AssistantMessage
    from vita.evaluator import evaluator_traj
    from vita.utils.llm_utils import format_messages

    sent = []

    def fake_generate(model, messages, **kwargs):
        sent.append(format_messages(messages))
        return AssistantMessage(role="assistant", content=replies[len(sent) - 1])

    monkeypatch.setattr(evaluator_traj, "generate", fake_generate)
    result = evaluator_traj.TrajectoryEvaluator.calculate_reward(
        task=episode.task.data,
        full_trajectory=vita_messages(episode),
        final_state={},
        llm_evaluator="judge",
        llm_args_evaluator={},
        language="english",
    )
    monkeypatch.undo()
    return sent, result


@pytest.mark.parametrize("replies", [[_verdict([0], fenced=True), _verdict([1, 2])], [_verdict(list(range(20))), "[]"]])
def test_the_judge_sends_vitabench_evaluator_prompts_and_scores_as_it_does(server, monkeypatch, recorded, replies):
    from vita.data_model.tasks import RewardType

    from envace_gym.suites.vitabench.reward import VitaBenchReward

    url, _ = server
    sent, theirs = vitabench_evaluation(monkeypatch, recorded, replies)
    assert len(sent) == 2
    FakeChatServer.replies = [{"role": "assistant", "content": r} for r in replies]
    value, parts = VitaBenchReward("judge", url)(recorded)
    assert [r["messages"] for r in FakeChatServer.requests] == sent
    assert value == theirs.reward and parts["rubrics_met"] == theirs.reward_breakdown[RewardType.NL_ASSERTION]
    assert [(r["rubric"], r["met"]) for r in parts["rubrics"]] == [(c.nl_rubric, c.met) for c in theirs.nl_rubrics]
    assert parts["windows"] == 2 and 0 < parts["rubrics_met"] <= 1 and value == (parts["rubrics_met"] == 1)


def test_a_malformed_or_unreachable_judge_is_a_clear_error_and_the_episode_is_kept(server, recorded):
    from envace_gym.suites.vitabench.reward import VitaBenchReward

    url, _ = server
    FakeChatServer.replies = [{"role": "assistant", "content": "I would rather not say."}]
    value, parts = VitaBenchReward("judge", url)(recorded)
    assert value == 0.0 and parts["error"]["code"] == "malformed_judgement" and "window 1" in parts["error"]["message"]
    env = gym.make(DELIVERY, reward="vitabench:judge@http://127.0.0.1:9/v1?timeout=2&max_retries=0")
    reward, info, _ = play(env, Scripted([format_tool_call("get_user_all_orders", {}), STOP]), task_id="10711001")
    assert reward == 0.0 and "127.0.0.1:9" in info["error"] and len(env.unwrapped.episode.messages) == 6


def _one_verdict(**fields) -> str:
    return json.dumps([{"rubric_idx": "rubric_0", "justification": "seen", "meetExpectation": True, **fields}])


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ('["' * 20_000, "40000 characters, over the 32000"),  # json_repair would take minutes on it
        ('["' * 1_500, "over 2048 brackets and quotes"),
        ("[" * 2_000 + "]" * 2_000, "not a list of rubric verdicts"),  # a RecursionError in the parse
        (_one_verdict(meetExpectation="maybe"), "verdict 0 a meetExpectation of 'maybe', not a bool"),
        (_one_verdict(meetExpectation=None), "meetExpectation of None"),
        (_one_verdict(justification=None), "justification of None, not a str"),
        (_one_verdict(rubric_idx=["rubric_0"]), "rubric_idx of ['rubric_0'], not a str"),
    ],
)
def test_a_huge_deep_or_ill_typed_judgement_is_malformed_naming_the_judge(server, recorded, reply, why):
    from envace_gym.suites.vitabench.reward import VitaBenchReward

    url, _ = server
    FakeChatServer.replies = [{"role": "assistant", "content": reply}]
    value, parts = VitaBenchReward("judge", url)(recorded)
    assert value == 0.0 and parts["error"]["code"] == "malformed_judgement", parts
    assert parts["error"]["message"].startswith(f"judge judge@{url}: its reply to window 1 ") and why in str(parts)


def test_a_structured_judge_is_sent_vitabench_reply_format_as_a_json_schema(server, recorded):
    from envace_gym.rewards import resolve_reward
    from envace_gym.suites.vitabench.source import judge_options

    url, _ = server
    FakeChatServer.replies = [{"role": "assistant", "content": _verdict([0, 1, 2, 3, 4])}] * 2
    judge = resolve_reward(f"vitabench:judge@{url}?timeout=30&structured=1&max_tokens=300")
    value, parts = judge(recorded)
    assert value == 1.0 and parts["windows"] == 2 and not FakeChatServer.replies
    for request in FakeChatServer.requests:
        assert request["max_tokens"] == 300
        schema = request["response_format"]["json_schema"]["schema"]
        assert schema["minItems"] == schema["maxItems"] == len(parts["rubrics"]) == 5
        assert schema["items"]["properties"]["rubric_idx"]["enum"] == [f"rubric_{i}" for i in range(5)]
    FakeChatServer.requests = []
    resolve_reward(f"vitabench:judge@{url}")(recorded)  # VitaBench's own request: no format, no cap
    assert not any("response_format" in r or "max_tokens" in r for r in FakeChatServer.requests)
    assert judge_options("m@http://h/v1?timeout=5&structured=1") == ("m@http://h/v1?timeout=5", {"structured": 1})
    with pytest.raises(ValueError, match="whole number"):
        judge_options("m@http://h/v1?max_tokens=lots")
    with pytest.raises(ValueError, match="unknown option 'nope'"):
        resolve_reward(f"vitabench:judge@{url}?nope=1")


HOSTILE_NAMES = ["__init__", "__class__", "_get_store", "use_tool", "get_now", "db", "tools", "x.y"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def fuzzed():
    return make(DELIVERY)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(HOSTILE_NAMES + ["create_delivery_order", "cancel_delivery_order", "weather"]),
    st.dictionaries(st.sampled_from(["user_id", "order_id", "product_ids", "address", "x"]), json_values, max_size=4),
    st.sampled_from(["", "{", "<tool_call>", "</tool_call>"]),
)
def test_hostile_calls_never_raise_and_rejected_ones_change_nothing(fuzzed, name, arguments, junk):
    fuzzed.reset(seed=0, options={"task_id": "10711001"})
    before = fuzzed.episode.world.env.tools.db.model_dump()
    obs, _, _, _, info = fuzzed.step(format_tool_call(name, arguments) + junk)
    assert fuzzed.observation_space.contains(obs)
    if all(c["source"] == "rejected" for c in info["tool_calls"]):
        assert fuzzed.episode.world.env.tools.db.model_dump() == before
    if name in HOSTILE_NAMES:
        assert info["tool_calls"][0]["error"] in ("unknown_tool", "malformed_call")  # inf is not JSON


def test_the_scripted_user_answers_a_question_with_the_sentence_it_is_about():
    from types import SimpleNamespace

    from envace_gym.suites.vitabench.users import ScriptedUser

    instructions = (
        "You want to order two bowls of beef noodles from a noodle shop near your office. "
        "Deliver them to Room 301, Building A. You want them delivered at 12:30 pm. "
        "Pay with the default payment method."
    )
    user = ScriptedUser(SimpleNamespace(id="t", data=SimpleNamespace(instructions=instructions)))
    assert user.reply("What time would you like it delivered?", None).text == "You want them delivered at 12:30 pm."
    assert user.reply("Where should we deliver the order?", None).text == "Deliver them to Room 301, Building A."
    assert user.reply("How would you like to pay?", None).text == "Pay with the default payment method."
    assert user.reply("What time again?", None).text == "I have no preference for the time."
    assert user.reply("Do you want chopsticks?", None).text == "I have no preference; please go ahead."
    assert user.reply("Your order is placed.", None).text == "Yes, please go ahead."


@pytest.mark.slow
@pytest.mark.vllm
def test_a_judge_served_here_gives_vitabench_a_score(smollm2_server, tmp_path, monkeypatch):
    """SmolLM2-135M in `vllm serve` judging one delivery episode: through `eval --judge`, VitaBench's free-form
    prompt, whose replies SmolLM2 writes as prose (a malformed judgement, scored 0, the episode kept); through
    `run --reward vitabench:...?structured=1`, the verdict list as a JSON schema, which it fills."""
    replies = []
    chat = ChatEndpoint.chat
    monkeypatch.setattr(
        ChatEndpoint, "chat", lambda self, *a, **kw: replies.append(chat(self, *a, **kw)) or replies[-1]
    )
    runner, judge = CliRunner(), f"smollm2@{smollm2_server}?timeout=300&max_retries=0"
    agent = ["--agent", "test_vitabench:OrdersAndPays", "--max-turns", "6", "--limit", "1"]
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", *agent, "--suites", DELIVERY, "--judge", judge, "--out", str(out)])
    assert result.exit_code in (0, 1), result.output  # 1: an episode failed, and the table still came
    (vita,) = EvalResults.model_validate_json((out / "results.json").read_text()).benchmarks
    assert vita.name == "VitaBench" and vita.episodes == 1 and vita.score is not None and 0 <= vita.score <= 100
    (record,) = [json.loads(line) for line in open(vita.records[0])]
    assert record["reward_source"] == "vitabench" and record["real_calls"] == 3
    error = record["reward_info"].get("error")
    assert error == {"code": "malformed_judgement"} or record["reward_info"]["windows"] == 1
    print(f"VitaBench {vita.score}, SmolLM2's free-form judgement: {replies[-1].content!r}")
    replies.clear()
    records = tmp_path / "run.jsonl"
    spec = f"vitabench:{judge}&structured=1&max_tokens=300"
    result = runner.invoke(app, ["run", DELIVERY, *agent, "--reward", spec, "--out", str(records)])
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in records.open()]
    verdicts = json.loads(replies[-1].content)
    assert [v["rubric_idx"] for v in verdicts] == [f"rubric_{i}" for i in range(len(verdicts))]
    assert "error" not in record["reward_info"] and record["reward_info"]["windows"] == 1
    assert record["reward"] in (0.0, 1.0) and 0 <= record["reward_info"]["rubrics_met"] <= 1
    print(f"reward {record['reward']}, rubrics met {record['reward_info']['rubrics_met']}: {replies[-1].content!r}")


USER = "U000001"  # the user of delivery task 10711001, whose world the cross-domain task extends
HOTEL = {
    "hotel_id": "H0001",
    "hotel_name": "West Lake Garden Hotel",
    "score": 4.6,
    "star_rating": 4,
    "location": {"address": "18 Beishan Street, Xihu District, Hangzhou", "longitude": 120.14, "latitude": 30.26},
    "tags": ["lake view", "free breakfast"],
    "products": [{"product_id": "R0001", "price": 680.0, "quantity": 2, "date": "2025-06-28", "room_type": "king"}],
}
BOOK_AND_PAY = [
    format_tool_call("hotel_search_recommand", {"city_name": "Hangzhou", "key_words": ["lake view"]}),
    format_tool_call("create_hotel_order", {"hotel_id": "H0001", "room_id": "R0001", "user_id": USER}),
    format_tool_call("pay_hotel_order", {"order_id": LATEST}),
]


def new_task(task_id: str, domain: str, environment: dict) -> dict:
    """A task in VitaBench's task-file format."""
    rubrics = ["The assistant books a king room at West Lake Garden Hotel for 2025-06-28", "The order is paid"]
    return {
        "id": task_id,
        "domain": domain,
        "message_history": [],
        "environment": environment,
        "user_scenario": {"user_profile": {"user id": USER, "residence": "Hangzhou"}},
        "instructions": "You want a lake-view room in Hangzhou for the night of 2025-06-28. Pay for it right away.",
        "evaluation_criteria": {
            "expected_states": [{"required_orders": [], "optional_orders": [], "state_rubrics": rubrics}],
            "overall_rubrics": rubrics,
        },
    }


@pytest.fixture(scope="module")
def new_root(tmp_path_factory):
    """A VitaBench checkout that holds OTA and cross-domain task files: the snapshot's code (linked, not
    copied) and a task file of each, one task, in VitaBench's format."""
    root = tmp_path_factory.mktemp("vitabench")
    (root / "src").symlink_to(Path(os.environ["VITABENCH_ROOT"]).resolve() / "src")
    world = make(DELIVERY).suite.task("10711001").data.environment
    tasks = {
        "ota": new_task("ota-1", "ota", {"time": world["time"], "user_id": USER, "hotels": {"H0001": HOTEL}}),
        "cross_domain": new_task("cross-1", "delivery,instore,ota", {**world, "hotels": {"H0001": HOTEL}}),
    }
    for name, task in tasks.items():
        (root / "data" / "vita" / "domains" / name).mkdir(parents=True)
        (root / "data" / "vita" / "domains" / name / "tasks_en.json").write_text(json.dumps([task]))
    return root


@pytest.fixture
def new_suites(new_root, monkeypatch):
    """The OTA and cross-domain suites on ``new_root``'s task files: VitaBench's task folder set where it
    is when ``VITABENCH_ROOT`` names that checkout (this process loaded VitaBench from the snapshot)."""
    from vita.utils import utils

    from envace_gym.suites.vitabench.suite import VitaSuite

    monkeypatch.setattr(utils, "DOMAIN_DIR", new_root / "data" / "vita" / "domains")
    return {"ota": VitaSuite("ota"), "cross_domain": VitaSuite("cross_domain")}


def test_without_their_task_files_the_ota_and_cross_domain_suites_name_the_missing_file():
    from envace_gym.suites.vitabench.suite import get_suite

    for domain in ("ota", "cross_domain"):
        with pytest.raises(ImportError, match=rf"has no {domain} tasks: .*/{domain}/tasks_en\.json is missing"):
            get_suite(domain)


@pytest.mark.parametrize("dynamics", ["real", "rehearsed"])
def test_ota_and_cross_domain_tasks_play_where_the_checkout_holds_them(server, new_suites, dynamics):
    from envace_gym.env import EnvACEEnv

    url, _ = server
    ota, cross = new_suites["ota"], new_suites["cross_domain"]
    assert (ota.name, cross.name, ota.task_ids(None), cross.task_ids(None)) == (
        "vitabench-ota",
        "vitabench-cross-domain",
        ["ota-1"],
        ["cross-1"],
    )
    for suite, task_id, extra in (
        (ota, "ota-1", []),
        (cross, "cross-1", [format_tool_call(*delivery_calls(cross.task("cross-1"))[7])]),
    ):
        FakeChatServer.replies = [{"role": "assistant", "content": RUBRICS_ALL_MET}] * 2  # two windows at most
        env = EnvACEEnv(suite, dynamics=dynamics, reward=f"vitabench:judge@{url}")
        reward, info, infos = play(env, Scripted(BOOK_AND_PAY + extra + [STOP]), task_id=task_id)
        assert reward == 1.0 and info["ended_by"] == "user_stop" and info["reward_info"]["rubrics_met"] == 1.0, info
        calls = [c for i in infos for c in i["tool_calls"]]
        assert len(calls) == 3 + len(extra) and {c["source"] for c in calls} == {dynamics}
        if dynamics == "real":
            responses = [c.native for c in env.episode.calls]
            assert "West Lake Garden Hotel" in responses[0] and responses[2] == "Payment successful", responses
            assert all(c.error is None for c in env.episode.calls)
    tools = {t["function"]["name"] for t in cross.tools(cross.task("cross-1")).schemas}
    assert {"create_hotel_order", "create_delivery_order", "instore_book"} <= tools  # the three domains' tools


def test_a_cross_domain_fork_has_its_own_merged_world(new_suites):
    from envace_gym.env import EnvACEEnv

    env = EnvACEEnv(new_suites["cross_domain"], reward=lambda episode: 0.0)
    env.reset(options={"task_id": "cross-1"})
    for action in BOOK_AND_PAY[:2]:
        env.step(action)
    (order,) = ANY_ORDER_ID.findall(env.episode.calls[-1].native)
    fork = env.fork()
    fork.step(format_tool_call("pay_hotel_order", {"order_id": order}))
    detail = format_tool_call("get_hotel_order_detail", {"order_id": order})
    fork.step(detail)
    env.step(detail)
    assert "status:paid" in fork.episode.calls[-1].native and "status:unpaid" in env.episode.calls[-1].native


def test_vitabench_root_with_the_files_gives_the_ota_and_cross_domain_suites(new_root):
    """VITABENCH_ROOT naming the checkout is all it takes: its code (linked) and its task files are found."""
    script = (
        "from envace_gym import EnvACEEnv\n"
        "from envace_gym.suites.vitabench.suite import get_suite\n"
        "for d in ('ota', 'cross_domain'):\n"
        "    env = EnvACEEnv(get_suite(d))\n"
        "    print(d, env.unwrapped.task_ids, len(env.unwrapped.tools.schemas))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VITABENCH_ROOT": str(new_root)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0].startswith("ota ['ota-1']")
    assert done.stdout.splitlines()[1].startswith("cross_domain ['cross-1']")
