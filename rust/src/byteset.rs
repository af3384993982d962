//! Byte-level pieces shared by the automaton, the streams and the token path: the 128-bit set
//! of a run of bytes, and the size of a token's head. The lowest floor of the crate: it uses
//! nothing else in it.

/// How many bytes of a token [`Vocab::whole_head`](crate::tokens::Vocab::whole_head) hands out as an
/// array.
pub(crate) const HEAD: usize = 8;

/// The set of `b & 0x7f` over `bytes`, as 128 bits: exact for ASCII, and a byte at or above
/// 0x80 only ever adds a bit, so an empty intersection with a set of bytes built the same way
/// proves that none of them occurs.
pub(crate) fn byte_set(bytes: &[u8]) -> [u64; 2] {
    let mut set = [0u64; 2];
    for &b in bytes {
        let b = b & 0x7f;
        set[usize::from(b >> 6)] |= 1 << (b & 63);
    }
    set
}
