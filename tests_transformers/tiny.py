"""A tiny Llama model and its tokenizer, made on the spot (nothing is downloaded).

The tokenizer is a byte-level BPE (GPT-2 style) trained on this repository's README and a few
non-ASCII lines; the model is a 2-layer ``LlamaForCausalLM`` with seeded random weights. Random
weights sample near-uniformly over the vocabulary: odd text (non-ASCII, byte tokens that split
or break characters, repeats), which is what the stops are drawn from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

EXTRA_TEXT = [
    "café naïve façade über straße ß Ünïcödé \u2018quotes\u2019 “double” — dash … ellipsis",
    "日本語のテキストと中文文本\uff0c还有한국어 텍스트。",
    "emoji 😀🎉🚀 and math ∑∫√∞ ≤ ≥ ≠ and arrows → ← ↔",
    "Ελληνικά κείμενα και русский текст и עברית",
    "<answer>42</answer> User: Question: END end. The end.",
]
SPECIAL = ["<s>", "</s>", "<pad>"]


def make_tokenizer(vocab_size: int = 800, special: tuple[str, ...] = ()) -> Any:
    """A ``PreTrainedTokenizerFast`` over a byte-level BPE trained here; ``special`` adds
    special tokens (besides ``<s>``, ``</s>`` and ``<pad>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL, *special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tok.train_from_iterator([readme[:20000], *EXTRA_TEXT * 20], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def make_model(tokenizer: Any, seed: int = 0) -> Any:
    """A 2-layer ``LlamaForCausalLM`` with seeded random weights, in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Random weights of the default scale give near-uniform sampling; a larger scale gives the
    # model preferences (repeats, runs of one kind of token) as a trained one has.
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(4.0)
    return model.eval()


PEER_TEXT = [
    "<|im_start|><|im_end|> stop e nd the end end of They completed the challenging puzzle,",
    "revealing the hidden image at the end. Today a dragon flew over France. The aroma of",
    "freshly baked pizza filled the kitchen. abc baa abbbbbbb a b s eNd en d 대화 끝 다음",
    "작업 완료 후속 abc 끝!",
]


def make_byte_fallback_tokenizer() -> Any:
    """A SentencePiece-style BPE (Llama 2's layout: ``▁`` for spaces, ``<0xNN>`` byte tokens,
    decoder ``Replace``/``ByteFallback``/``Fuse``/``Strip``) with a small alphabet, so that
    Hangul comes out as byte tokens."""
    import json

    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    from transformers import PreTrainedTokenizerFast

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
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>"],
        limit_alphabet=60,
        show_progress=False,
    )
    tok.train_from_iterator([*PEER_TEXT, *EXTRA_TEXT[:1]] * 5, trainer)
    config = json.loads(tok.to_str())
    vocab: dict[str, int] = config["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    config["model"]["byte_fallback"] = True
    backend = Tokenizer.from_str(json.dumps(config))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def make_wordpiece_tokenizer() -> Any:
    """A BERT-style WordPiece tokenizer (decoder ``WordPiece``: not byte-level)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[UNK]", "[PAD]"], show_progress=False
    )
    tok.train_from_iterator(PEER_TEXT * 5, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def make_peer_tokenizer(im_special: bool) -> Any:
    """A byte-level BPE for the peer cases: ``<|im_start|>``/``<|im_end|>`` are special tokens
    with ``im_special`` (as in Qwen's), plain text otherwise (as in GPT-2's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", *(["<|im_start|>", "<|im_end|>"] if im_special else [])]
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(PEER_TEXT * 5, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
