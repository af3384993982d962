"""``Vocab``, with its constructors that read token bytes out of tokenizer objects.

Each reader returns ``(tokens, special, strip_leading_space)``: every id's bytes in id order
(``None`` for an unassigned id), the special ids (decoded as nothing, as with special tokens
skipped), and whether the decoder drops the first space of the text. Neither library is
imported here: the objects are read through their public (or stable) attributes.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stopstream import _core

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Vocab", "byte_level_table", "tiktoken_tokens", "tokenizers_tokens"]

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


@functools.cache
def byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _byte_level(token: str) -> bytes:
    table = byte_level_table()
    return b"".join(
        bytes((table[c],)) if c in table else c.encode("utf-8", "surrogatepass") for c in token
    )


def _sentencepiece(decoders: list[dict[str, Any]]) -> tuple[Callable[[str], bytes], bool]:
    """A per-token decoder for ``Sequence([Replace, ByteFallback, Fuse, Strip])``-style chains."""
    byte_token = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # compiled here, not at `import stopstream`
    replacements: list[tuple[str, str]] = []
    byte_fallback = False
    fused = False
    strip = False
    for d in decoders:
        kind = d.get("type")
        if kind == "Replace" and not fused:
            pattern = d.get("pattern", {})
            if "String" not in pattern:
                raise ValueError(
                    f"unsupported decoder: Replace with a {next(iter(pattern))} pattern"
                )
            replacements.append((pattern["String"], d["content"]))
        elif kind == "ByteFallback" and not fused:
            byte_fallback = True
        elif kind == "Fuse":
            fused = True
        elif (
            kind == "Strip"
            and fused
            and d.get("content") == " "
            and d.get("start") in (0, 1)
            and d.get("stop") == 0
        ):
            strip = bool(d["start"])
        else:
            import json  # here, as in tokenizers_tokens

            raise ValueError(f"unsupported decoder in Sequence: {json.dumps(d)}")

    def decode(token: str) -> bytes:
        if byte_fallback and (m := byte_token.fullmatch(token)):
            return bytes((int(m.group(1), 16),))
        for old, new in replacements:
            token = token.replace(old, new)
        return token.encode("utf-8", "surrogatepass")

    return decode, strip


def _metaspace(d: dict[str, Any]) -> tuple[Callable[[str], bytes], bool]:
    replacement = d.get("replacement", "\u2581")
    scheme = d.get("prepend_scheme")
    strip = scheme in ("always", "first") if scheme is not None else bool(d.get("add_prefix_space"))

    def decode(token: str) -> bytes:
        return token.replace(replacement, " ").encode("utf-8", "surrogatepass")

    return decode, strip


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
    # Imported here: `import stopstream`, which defines `Vocab` in this module, need not pay
    # for `json`.
    import json

    config = json.loads(backend.to_str())
    decoder = config.get("decoder")
    decode: Callable[[str], bytes]
    if decoder is None:
        raise ValueError("unsupported decoder: the tokenizer has none")
    kind = decoder.get("type")
    if kind == "ByteLevel":
        decode, strip = _byte_level, False
    elif kind == "Metaspace":
        decode, strip = _metaspace(decoder)
    elif kind == "Sequence":
        parts = decoder.get("decoders", [])
        if len(parts) == 1 and parts[0].get("type") in ("ByteLevel", "Metaspace"):
            decode, strip = (
                (_byte_level, False) if parts[0]["type"] == "ByteLevel" else _metaspace(parts[0])
            )
        else:
            decode, strip = _sentencepiece(parts)
    else:
        raise ValueError(f"unsupported decoder: {kind}")
    n = int(backend.get_vocab_size(with_added_tokens=True))
    tokens: list[bytes | None] = [None] * n
    for token, i in backend.get_vocab(with_added_tokens=True).items():
        if i >= n:
            tokens.extend([None] * (i + 1 - n))
            n = i + 1
        tokens[i] = decode(token)
    special = sorted(a["id"] for a in config.get("added_tokens", []) if a.get("special"))
    return tokens, special, strip


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
