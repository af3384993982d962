"""Token bytes of a Hugging Face ``tokenizers`` vocabulary (``Vocab.from_tokenizers``), for the
token reference."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any


@functools.cache
def _byte_level_table() -> dict[str, int]:
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
    table = _byte_level_table()
    return b"".join(
        bytes((table[c],)) if c in table else c.encode("utf-8", "surrogatepass") for c in token
    )


def _sentencepiece(decoders: list[dict[str, Any]]) -> tuple[Callable[[str], bytes], bool]:
    """A per-token decoder for ``Sequence([Replace, ByteFallback, Fuse, Strip])``-style chains."""
    import json

    replacements: list[tuple[str, str]] = []
    byte_fallback = fused = strip = False
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
            raise ValueError(f"unsupported decoder in Sequence: {json.dumps(d)}")

    def decode(token: str) -> bytes:
        if byte_fallback and (m := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)):
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


def reference_tokenizer_tokens(
    config: dict[str, Any], vocab: dict[str, int], size: int
) -> tuple[list[bytes | None], list[int], bool]:
    """Every id's bytes (``None`` unassigned), the special ids and whether the decoder drops
    the first space, from a tokenizer's JSON (``json.loads(tokenizer.to_str())``), its
    ``get_vocab(with_added_tokens=True)`` and its ``get_vocab_size(with_added_tokens=True)``:
    ``ByteLevel``, ``Metaspace`` and ``Replace``/``ByteFallback``/``Fuse``/``Strip`` chains;
    any other decoder is a ``ValueError`` naming it."""
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
    tokens: list[bytes | None] = [None] * size
    for token, i in vocab.items():
        if i >= len(tokens):
            tokens.extend([None] * (i + 1 - len(tokens)))
        tokens[i] = decode(token)
    special = sorted(a["id"] for a in config.get("added_tokens", []) if a.get("special"))
    return tokens, special, strip
