"""A tiny Llama model made on the spot (no download): a byte-level BPE tokenizer trained on this
repository's text (with ``<think>``/``</think>`` tokens, for vLLM's reasoning parsers), and a
2-layer config that vLLM runs with dummy (random) weights.

Random weights make random token sequences: a good source of odd text for stops (non-ASCII,
byte tokens that split characters, repeats). Head size 64: the CPU attention kernels refuse
smaller ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# Non-ASCII lines, so that the vocabulary has multi-byte characters and their pieces.
EXTRA_TEXT = [
    "café naïve façade über straße ß Ünïcödé \u2018quotes\u2019 “double” — dash … ellipsis",
    "日本語のテキストと中文文本\uff0c还有한국어 텍스트。",
    "emoji 😀🎉🚀 and math ∑∫√∞ ≤ ≥ ≠ and arrows → ← ↔",
    "Ελληνικά κείμενα και русский текст и עברית",
]


REASONING_MARKERS = ("<think>", "</think>")


def make_model(directory: Path, vocab_size: int = 600) -> Path:
    """Write the tokenizer and config into ``directory``; return it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    texts = [(REPO / "README.md").read_text(encoding="utf-8"), *EXTRA_TEXT * 50]
    tok.train_from_iterator(texts, trainer)
    # Reasoning markers, as reasoning models have them: tokens of their own, not special (their
    # text is part of the output), which vLLM's reasoning parsers look up by text.
    tok.add_tokens(list(REASONING_MARKERS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        # Room for the served tests' long requests (the in-process engine uses 256).
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=True,
    )
    config.save_pretrained(directory)
    (directory / "generation_config.json").write_text(
        json.dumps({"bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id})
    )
    return directory


def engine_kwargs() -> dict[str, object]:
    """The ``vllm.LLM`` arguments the tests use with the tiny model."""
    return {
        "load_format": "dummy",
        "dtype": "float32",
        "max_model_len": 256,
        "enforce_eager": True,
        "seed": 0,
    }


def whole_character_ids(vocab: Any) -> list[int]:
    """The ids of a ``stopstream.Vocab`` whose bytes are whole UTF-8 characters on their own:
    a request sampling only these keeps valid text to the end."""

    def whole(data: bytes | None) -> bool:
        if not data:
            return False
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    return [i for i in range(len(vocab)) if whole(vocab.token_bytes(i))]
