//! [`Recent`], the few stop lists used last, and [`same_stops`], the comparison that finds a
//! list among them. A gateway builds a filter per request, nearly always from one of a few
//! lists: the bindings compare the list given with these directly (a length check and a
//! `memcmp` per stop), before anything is encoded, hashed or looked up in the process-wide
//! cache of compiled lists.

/// A short most-recently-used list: a hit moves to the front, a new item goes in front, and
/// past `N` items the oldest falls off.
#[derive(Debug)]
pub struct Recent<T, const N: usize> {
    items: Vec<T>,
}

impl<T, const N: usize> Recent<T, N> {
    /// An empty list (a `const fn`, for a `static`).
    #[must_use]
    pub const fn new() -> Self {
        Recent { items: Vec::new() }
    }

    /// The first item that `found` accepts, moved to the front.
    pub fn hit(&mut self, found: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let pos = self.items.iter().position(found)?;
        let item = self.items.remove(pos);
        self.items.insert(0, item);
        self.items.first_mut()
    }

    /// Puts `item` in front.
    pub fn remember(&mut self, item: T) {
        self.items.insert(0, item);
        self.items.truncate(N);
    }
}

impl<T, const N: usize> Default for Recent<T, N> {
    fn default() -> Self {
        Recent::new()
    }
}

/// Whether the list `items` equals `stops`, with `same(item, stop)` telling whether an item is
/// that stop. The last stop is compared first, then the others in order: a list made per
/// request that differs from a recent one by a stop appended for that request is then told
/// apart in one comparison instead of a walk over the whole list (some 65 µs for 10,000 stops,
/// for each recent list as long), and an equal list costs no comparison more. The items are
/// walked, not indexed: indexing a Python list item by item cost 2 ns a stop more.
#[inline]
pub fn same_stops<T, I>(
    stops: &[Box<[u8]>],
    items: I,
    mut same: impl FnMut(T, &[u8]) -> bool,
) -> bool
where
    I: IntoIterator<Item = T>,
    I::IntoIter: ExactSizeIterator + DoubleEndedIterator,
{
    let mut items = items.into_iter();
    if items.len() != stops.len() {
        return false;
    }
    let Some((last, rest)) = stops.split_last() else { return true };
    items.next_back().is_some_and(|item| same(item, last))
        && rest.iter().zip(items).all(|(stop, item)| same(item, stop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_moves_to_the_front_and_the_oldest_falls_off() {
        let mut r: Recent<u32, 3> = Recent::new();
        for i in 1..=4 {
            r.remember(i);
        }
        assert_eq!(r.items, [4, 3, 2]);
        assert_eq!(r.hit(|&i| i == 2).copied(), Some(2));
        assert_eq!(r.items, [2, 4, 3]);
        assert_eq!(r.hit(|&i| i == 1), None);
        *r.hit(|&i| i == 3).unwrap() = 30;
        assert_eq!(r.items, [30, 2, 4]);
    }

    #[test]
    fn lists_compare_last_stop_first() {
        let stops: Vec<Box<[u8]>> = vec![Box::from(&b"a"[..]), Box::from(&b"bc"[..])];
        let table: [(&[&[u8]], bool); 7] = [
            (&[b"a", b"bc"], true),
            (&[b"a", b"b"], false),
            (&[b"x", b"bc"], false),
            (&[b"a"], false),
            (&[b"a", b"bc", b"d"], false),
            (&[b"a", b"x", b"bc"], false),
            (&[], false),
        ];
        for (given, equal) in table {
            let mut order = Vec::new();
            let got = same_stops(&stops, given.iter().enumerate(), |(i, g), s| {
                order.push(i);
                *g == s
            });
            assert_eq!(got, equal, "{given:?}");
            if given.len() == stops.len() {
                assert_eq!(order[0], given.len() - 1, "the last stop first: {given:?}");
            }
        }
        assert!(same_stops(&[], std::iter::empty::<u8>(), |_, _| unreachable!()));
    }
}
