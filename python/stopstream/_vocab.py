"""``Vocab``, with its constructors that read token bytes out of tokenizer objects.

Each reader returns ``(tokens, special, strip_leading_space)``: every id's bytes in id order
(``None`` for an unassigned id), the special ids (decoded as nothing, as with special tokens
skipped), and whether the decoder drops the first space of the text. Neither library is
imported here: the objects are read through their public (or stable) attributes.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from stopstream import _core

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Vocab", "tiktoken_tokens", "tokenizers_tokens"]

Tokens = tuple[list[bytes | None], list[int], bool]


def tiktoken_tokens(encoding: Any) -> Tokens:
    """Every id of a ``tiktoken.Encoding``: its mergeable ranks and its special tokens."""
    n = int(encoding.n_vocab)
    tokens: list[bytes | None] = [None] * n
    ranks = getattr(encoding, "_mergeable_ranks", None)
    specials: dict[str, int] | None = getattr(encoding, "_special_tokens", None)
    if isinstance(ranks, dict) and isinstance(specials, dict):
        for token, rank in ranks.items():
            tokens[rank] = token
        for name, rank in specials.items():
            tokens[rank] = name.encode("utf-8")
        return tokens, sorted(specials.values()), False
    # Public API only: one lookup per id (ids without a token are holes).
    for i in range(n):
        with contextlib.suppress(KeyError):
            tokens[i] = encoding.decode_single_token_bytes(i)
    special = sorted(encoding.encode_single_token(s) for s in encoding.special_tokens_set)
    return tokens, special, False


def tokenizers_tokens(tokenizer: Any) -> Tokens:
    """Every id of a Hugging Face ``tokenizers.Tokenizer`` (or a ``transformers`` fast
    tokenizer, through its ``backend_tokenizer``).

    Supported decoders: ``ByteLevel`` (GPT-2 style byte-level BPE: each character stands for a
    byte), ``Metaspace``, and SentencePiece-style ``Sequence`` chains of ``Replace``,
    ``ByteFallback`` (``<0xNN>`` tokens are single bytes), ``Fuse`` and ``Strip`` (one leading
    space). Anything else is a ``ValueError`` naming the decoder.
    """
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "to_str"):
        raise TypeError(
            f"expected a tokenizers.Tokenizer, not {type(tokenizer).__module__}."
            f"{type(tokenizer).__qualname__}"
        )
    return _core._tokenizer_tokens(
        backend.to_str(),
        backend.get_vocab(with_added_tokens=True),
        int(backend.get_vocab_size(with_added_tokens=True)),
    )


class Vocab(_core.Vocab):
    """A tokenizer's vocabulary: token id to bytes, in one contiguous buffer.

    ``tokens[i]`` is id ``i``'s bytes (``None`` leaves the id unassigned: feeding it is an
    error); ``special`` ids contribute no text, as when decoding with special tokens skipped.
    ``strip_leading_space`` drops one space at the very start of a stream's text, as
    SentencePiece-style decoders do.
    """

    __slots__ = ()

    @classmethod
    def from_tiktoken(cls, encoding: object) -> Self:
        """The vocabulary of a ``tiktoken.Encoding`` (its holes stay unassigned; its special
        tokens are special)."""
        tokens, special, strip = tiktoken_tokens(encoding)
        return cls(tokens, special=special, strip_leading_space=strip)

    @classmethod
    def from_tokenizers(cls, tokenizer: object) -> Self:
        """The vocabulary of a Hugging Face ``tokenizers.Tokenizer`` (or a fast
        ``transformers`` tokenizer): byte-level BPE (``ByteLevel`` decoder), ``Metaspace``, and
        SentencePiece-style ``Replace``/``ByteFallback``/``Fuse``/``Strip`` chains. Any other
        decoder is a ``ValueError`` naming it. Special added tokens are special."""
        tokens, special, strip = tokenizers_tokens(tokenizer)
        return cls(tokens, special=special, strip_leading_space=strip)
