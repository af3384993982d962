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
