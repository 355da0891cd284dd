//! Places: how many of something one holder (a peer address, a key) and everyone together
//! may hold open at once. Open HTTP connections, open event streams and requests in flight
//! (per peer, per key) are all bounded this way; a place is given back when its guard is
//! dropped, however the holder ended.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// At most `per_holder` places per holder and `total` in all.
pub struct Places<K: Hash + Eq + Clone> {
    per_holder: usize,
    total: usize,
    open: Arc<Mutex<Open<K>>>,
}

struct Open<K> {
    total: usize,
    by_holder: HashMap<K, usize>,
}

/// One place; given back when dropped.
pub struct Place<K: Hash + Eq + Clone> {
    holder: K,
    open: Arc<Mutex<Open<K>>>,
}

/// Why a place was refused: what was open, the holder's and in all.
#[derive(Debug, PartialEq, Eq)]
pub struct Full {
    pub holder: usize,
    pub total: usize,
}

impl<K: Hash + Eq + Clone> Places<K> {
    pub fn new(per_holder: usize, total: usize) -> Self {
        Self { per_holder, total, open: Arc::new(Mutex::new(Open { total: 0, by_holder: HashMap::new() })) }
    }

    pub fn take(&self, holder: K) -> Result<Place<K>, Full> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let held = open.by_holder.get(&holder).copied().unwrap_or(0);
        if open.total >= self.total || held >= self.per_holder {
            return Err(Full { holder: held, total: open.total });
        }
        open.total += 1;
        open.by_holder.insert(holder.clone(), held + 1);
        Ok(Place { holder, open: Arc::clone(&self.open) })
    }

    /// Places taken now, by every holder.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

impl<K: Hash + Eq + Clone> Drop for Place<K> {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(n) = open.by_holder.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                open.by_holder.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_holder_and_in_all_and_given_back() {
        let places = Places::new(2, 3);
        let a1 = places.take("a").expect("first");
        let _a2 = places.take("a").expect("second");
        assert_eq!(places.take("a").err(), Some(Full { holder: 2, total: 2 }), "a third for one holder");
        let _b1 = places.take("b").expect("another holder");
        assert_eq!(places.take("b").err(), Some(Full { holder: 1, total: 3 }), "the total is reached");
        drop(a1);
        assert!(places.take("b").is_ok(), "a dropped place is given back");
    }
}
