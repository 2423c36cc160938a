"""A model that needs no hub: a tiny random-init Qwen3-style model with a tokenizer trained here (for
`envace-gym tiny-model`, the tests, the benchmarks and the studies)."""

from __future__ import annotations

import json
from pathlib import Path

from envace_gym.chat_template import TOOL_CHAT_TEMPLATE

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def _corpus(env_id: str | None) -> list[str]:
    if env_id is not None:  # gold episodes as the chat template renders them: what the model reads
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        from envace_gym.training.sft import gold_episodes
        from envace_gym.training.tokens import rendered

        renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=TOOL_CHAT_TEMPLATE)
        return [rendered(renderer, e["messages"], e["tools"]) for e in gold_episodes(env_id, "train", 100)]
    from envace_gym.suites.tau2 import get_suite

    suite = get_suite("retail")
    task = suite.task(suite.task_ids("base")[0])
    texts = [suite.system_prompt(task)]
    texts += [json.dumps(s) for s in suite.tools(task).schemas]
    texts += [json.dumps(c) for t in suite.task_ids("base")[:40] for c in suite.grader.gold_calls(suite.task(t))]
    return texts


def tiny_model(
    path: str | Path,
    vocab_size: int = 2048,
    hidden_size: int = 128,
    layers: int = 2,
    seed: int = 0,
    env_id: str | None = None,
) -> Path:
    """Write a random-init Qwen3 causal LM (head size 64) and its BPE tokenizer to ``path``.

    The tokenizer is trained on tau2 retail's policy and tool schemas, or with ``env_id`` on
    the oracle's episodes of its ``train`` split as the chat template renders them, merging
    across word boundaries (a whole policy line or call prefix can be one token: short
    sequences, fast learning). It carries the tool-aware chat template of
    :mod:`envace_gym.chat_template`.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if env_id is not None:  # words are lines
        bpe.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split("\n", "merged_with_previous"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL + MARKUP,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(env_id), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=TOOL_CHAT_TEMPLATE
    )
    tokenizer.save_pretrained(path)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=hidden_size // 64,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    Qwen3ForCausalLM(config).save_pretrained(path)
    return path
