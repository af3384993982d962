//! Tokenizer decoders (`TokenDecoder`): any bytes as a tokenizer's JSON, then (after a NUL byte)
//! a token's bytes. Checks, none needing a reference:
//! * no panic, reading any document or decoding any token with what was read;
//! * byte-level: every byte string, written in the byte-level alphabet, decodes back to itself,
//!   and a token never decodes to more bytes than it has;
//! * byte fallback: `<0xNN>` in either case decodes to the byte `NN`, and nothing else to one
//!   byte but a one-byte token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stopstream::TokenDecoder;

fn read(json: &str) -> TokenDecoder {
    TokenDecoder::read_tokenizer(json.as_bytes()).expect("a supported decoder").decoder
}

/// The byte-level alphabet's character for `b`: printable bytes stand for themselves, the
/// others are U+0100 onwards in byte order.
fn byte_level_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let below = (0..b).filter(|&c| !printable(c)).count();
    char::from_u32(256 + u32::try_from(below).unwrap()).unwrap()
}

fuzz_target!(|data: &[u8]| {
    let (json, token) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(read) = TokenDecoder::read_tokenizer(json) {
        let mut out = Vec::new();
        read.decoder.decode(token, &mut out);
    }

    let byte_level = read(r#"{"decoder": {"type": "ByteLevel"}}"#);
    let written: String = token.iter().map(|&b| byte_level_char(b)).collect();
    let mut out = Vec::new();
    byte_level.decode(written.as_bytes(), &mut out);
    assert_eq!(out, token, "byte-level round trip");
    out.clear();
    byte_level.decode(token, &mut out);
    assert!(out.len() <= token.len(), "byte-level decoding grew {token:?}");

    let fallback =
        read(r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]}}"#);
    for (i, &b) in token.iter().enumerate() {
        let spelled = if i % 2 == 0 { format!("<0x{b:02X}>") } else { format!("<0x{b:02x}>") };
        out.clear();
        fallback.decode(spelled.as_bytes(), &mut out);
        assert_eq!(out, [b], "{spelled}");
    }
    out.clear();
    fallback.decode(token, &mut out);
    if out.len() == 1 && token.len() != 1 {
        let spelled = std::str::from_utf8(token).unwrap_or("");
        assert!(
            spelled.len() == 6 && spelled.starts_with("<0x") && spelled.ends_with('>'),
            "{token:?} decoded to one byte"
        );
    }
});
