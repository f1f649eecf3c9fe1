//! A map that holds at most so many entries, forgetting the one used least recently to make
//! room: for what the operator remembers per key an author can choose (an account name, an
//! object an Event is about), so naming new keys can never grow it without bound.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

#[derive(Debug)]
pub(super) struct Lru<K, V> {
    capacity: usize,
    /// Bumped on every use: an entry's stamp says when it was last used.
    clock: u64,
    entries: HashMap<K, (V, u64)>,
    /// Stamp → key, oldest first: what to evict, found without a scan.
    order: BTreeMap<u64, K>,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// At least one entry is always held.
    pub(super) fn new(capacity: usize) -> Lru<K, V> {
        Lru {
            capacity: capacity.max(1),
            clock: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The value under `key`, now the most recently used.
    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let (value, stamp) = self.entries.get_mut(key)?;
        self.clock += 1;
        self.order.remove(stamp);
        *stamp = self.clock;
        self.order.insert(self.clock, key.clone());
        Some(value)
    }

    /// Inserts or replaces the value under `key`; returns the entry evicted to make room.
    pub(super) fn insert(&mut self, key: K, value: V) -> Option<(K, V)> {
        let evicted = self.make_room_for(&key);
        self.clock += 1;
        if let Some((_, stamp)) = self.entries.insert(key.clone(), (value, self.clock)) {
            self.order.remove(&stamp);
        }
        self.order.insert(self.clock, key);
        evicted
    }

    /// The value under `key`, inserted with `make` when absent (evicting the least recently
    /// used entry if the map is full); either way now the most recently used.
    pub(super) fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> &mut V {
        self.make_room_for(key);
        self.clock += 1;
        let (value, stamp) = self
            .entries
            .entry(key.clone())
            .or_insert_with(|| (make(), 0));
        // Stamps start at 1: 0 marks an entry just made, not yet in the order.
        self.order.remove(stamp);
        *stamp = self.clock;
        self.order.insert(self.clock, key.clone());
        value
    }

    /// Evicts the least recently used entry when `key` is new and the map is full.
    fn make_room_for(&mut self, key: &K) -> Option<(K, V)> {
        if self.entries.len() < self.capacity || self.entries.contains_key(key) {
            return None;
        }
        let (_, oldest) = self.order.pop_first()?;
        let (value, _) = self.entries.remove(&oldest)?;
        Some((oldest, value))
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;
    use proptest::prelude::*;

    #[test]
    fn the_least_recently_used_entry_makes_room() {
        let mut lru = Lru::new(2);
        assert_eq!(lru.insert("a", 1), None);
        assert_eq!(lru.insert("b", 2), None);
        // Reading `a` makes `b` the oldest.
        assert_eq!(lru.get_mut(&"a").copied(), Some(1));
        assert_eq!(lru.insert("c", 3), Some(("b", 2)));
        assert_eq!(lru.get_mut(&"b"), None);
        // Replacing a value evicts nothing and makes it the newest.
        assert_eq!(lru.insert("a", 10), None);
        assert_eq!(lru.insert("d", 4), Some(("c", 3)));
        assert_eq!(lru.len(), 2);
        *lru.get_or_insert_with(&"e", || 5) += 1;
        assert_eq!(lru.get_mut(&"a"), None, "a was the oldest");
        assert_eq!(lru.get_mut(&"e").copied(), Some(6));
        assert_eq!(lru.get_mut(&"d").copied(), Some(4), "d was used last");
        assert_eq!(*lru.get_or_insert_with(&"d", || 7), 4, "d is kept");
        *lru.get_or_insert_with(&"f", || 7) += 0;
        assert_eq!(lru.get_mut(&"e"), None, "e was the oldest");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever is done to it, the map holds at most its capacity, and exactly the entries
        /// a map without a bound would hold among the most recently used.
        #[test]
        fn holds_the_most_recently_used_within_its_capacity(
            capacity in 1usize..6,
            ops in proptest::collection::vec((0u8..3, 0u8..10), 0..200),
        ) {
            let mut lru = Lru::new(capacity);
            // The keys, most recently used last, and their values: the reference model.
            let mut model: Vec<(u8, u32)> = Vec::new();
            for (step, (op, key)) in ops.into_iter().enumerate() {
                let value = step as u32;
                match op {
                    0 => {
                        lru.insert(key, value);
                        model.retain(|(k, _)| *k != key);
                        model.push((key, value));
                        if model.len() > capacity {
                            model.remove(0);
                        }
                    }
                    1 => {
                        let got = lru.get_mut(&key).copied();
                        let position = model.iter().position(|(k, _)| *k == key);
                        prop_assert_eq!(got, position.map(|p| model[p].1));
                        if let Some(p) = position {
                            let entry = model.remove(p);
                            model.push(entry);
                        }
                    }
                    _ => {
                        let got = *lru.get_or_insert_with(&key, || value);
                        let position = model.iter().position(|(k, _)| *k == key);
                        let entry = match position {
                            Some(p) => model.remove(p),
                            None => (key, value),
                        };
                        prop_assert_eq!(got, entry.1);
                        model.push(entry);
                        if model.len() > capacity {
                            model.remove(0);
                        }
                    }
                }
                prop_assert!(lru.len() <= capacity);
                prop_assert_eq!(lru.len(), model.len());
            }
        }
    }
}
