//! One bucket's records by path: a map, or a vector in path order for the
//! records a first run builds all at once.
//!
//! A first run lists the tree in path order and adds every record to one
//! bucket. Inserted one by one in ascending order, a B-tree's nodes stay a
//! little over half full; at 100,000 records of a few hundred bytes that is
//! some 30 MB of memory touched for nothing, each page a fault. A vector of
//! the exact length holds them with no slack, answers a lookup by binary
//! search, and, since a tick looks its files up in path order, mostly at
//! the entry after the one it found last. The first insert that does not
//! go at the end (or any removal) turns it into the map.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::collections::btree_map;

use super::super::schema::FileRecord;

#[derive(Clone)]
pub struct Records(Repr);

#[derive(Clone)]
enum Repr {
    Map(BTreeMap<String, FileRecord>),
    Sorted(Sorted),
}

/// Records strictly ascending by path, and where the last lookups found theirs.
#[derive(Clone)]
struct Sorted {
    v: Vec<(String, FileRecord)>,
    /// The index of the last lookup that found its path, and the one before.
    hint: Cell<(usize, usize)>,
}

impl Sorted {
    fn find(&self, path: &str) -> Option<usize> {
        let (h, before) = self.hint.get();
        for i in [h, h + 1, before, before + 1] {
            if self.v.get(i).is_some_and(|(p, _)| p == path) {
                self.found(i);
                return Some(i);
            }
        }
        let found = Records::find(&self.v, h, path).ok();
        if let Some(i) = found {
            self.found(i);
        }
        found
    }

    /// The walk in path order keeps its place while the paths of a file's
    /// imports are looked up around it: the place before the last is tried too.
    fn found(&self, i: usize) {
        let (h, before) = self.hint.get();
        if i != h && i != h + 1 {
            self.hint.set((i, h));
        } else {
            self.hint.set((i, before));
        }
    }
}

impl Default for Records {
    fn default() -> Records {
        Records(Repr::Map(BTreeMap::new()))
    }
}

impl From<BTreeMap<String, FileRecord>> for Records {
    fn from(m: BTreeMap<String, FileRecord>) -> Records {
        Records(Repr::Map(m))
    }
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for Records {
    fn eq(&self, other: &Records) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Records {
    /// An empty bucket about to receive about `n` records in path order.
    pub fn sorted_with_capacity(n: usize) -> Records {
        Records(Repr::Sorted(Sorted {
            v: Vec::with_capacity(n),
            hint: Cell::new((0, 0)),
        }))
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Map(m) => m.len(),
            Repr::Sorted(s) => s.v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index of `path` in a sorted vector, searched outwards from the
    /// entry at `from`: a tick looks its files up in path order, and the
    /// paths a file's imports may resolve to are mostly its neighbours, so
    /// a lookup mostly ends within a few entries that are in the cache,
    /// where a binary search over the whole vector would touch a cold entry
    /// at each of its 17 steps.
    fn find(v: &[(String, FileRecord)], from: usize, path: &str) -> Result<usize, usize> {
        let Some(h) = v.len().checked_sub(1).map(|last| from.min(last)) else {
            return Err(0);
        };
        let key = |i: usize| v[i].0.as_str();
        let (lo, hi) = match key(h).cmp(path) {
            std::cmp::Ordering::Equal => return Ok(h),
            // Every entry before `lo` is below `path`.
            std::cmp::Ordering::Less => {
                let (mut lo, mut step) = (h + 1, 1);
                while h + step < v.len() && key(h + step) < path {
                    lo = h + step + 1;
                    step *= 2;
                }
                (lo, (h + step + 1).min(v.len()))
            }
            // Every entry from `hi` on is above `path`.
            std::cmp::Ordering::Greater => {
                let (mut hi, mut step) = (h, 1);
                while step <= h && key(h - step) > path {
                    hi = h - step;
                    step *= 2;
                }
                (h.saturating_sub(step), hi)
            }
        };
        v[lo..hi]
            .binary_search_by(|(p, _)| p.as_str().cmp(path))
            .map(|i| i + lo)
            .map_err(|i| i + lo)
    }

    pub fn get(&self, path: &str) -> Option<&FileRecord> {
        match &self.0 {
            Repr::Map(m) => m.get(path),
            Repr::Sorted(s) => s.find(path).map(|i| &s.v[i].1),
        }
    }

    pub fn get_mut(&mut self, path: &str) -> Option<&mut FileRecord> {
        match &mut self.0 {
            Repr::Map(m) => m.get_mut(path),
            Repr::Sorted(s) => s.find(path).map(|i| &mut s.v[i].1),
        }
    }

    pub fn insert(&mut self, path: String, record: FileRecord) -> Option<FileRecord> {
        if let Repr::Sorted(s) = &mut self.0 {
            if s.v.last().is_none_or(|(last, _)| *last < path) {
                s.v.push((path, record));
                return None;
            }
            if let Some(i) = s.find(&path) {
                return Some(std::mem::replace(&mut s.v[i].1, record));
            }
        }
        self.map().insert(path, record)
    }

    pub fn remove(&mut self, path: &str) -> Option<FileRecord> {
        self.get(path)?;
        self.map().remove(path)
    }

    /// The records as a map, which they become from now on.
    fn map(&mut self) -> &mut BTreeMap<String, FileRecord> {
        if let Repr::Sorted(s) = &mut self.0 {
            // Ascending and without duplicates: built without a sort.
            let m: BTreeMap<String, FileRecord> = std::mem::take(&mut s.v).into_iter().collect();
            self.0 = Repr::Map(m);
        }
        match &mut self.0 {
            Repr::Map(m) => m,
            Repr::Sorted(_) => unreachable!("made a map above"),
        }
    }

    /// The records in path order.
    pub fn iter(&self) -> Iter<'_> {
        match &self.0 {
            Repr::Map(m) => Iter::Map(m.iter()),
            Repr::Sorted(s) => Iter::Sorted(s.v.iter()),
        }
    }

    /// The records in path order, to change.
    pub fn iter_mut(&mut self) -> IterMut<'_> {
        match &mut self.0 {
            Repr::Map(m) => IterMut::Map(m.iter_mut()),
            Repr::Sorted(s) => IterMut::Sorted(s.v.iter_mut()),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.iter().map(|(p, _)| p)
    }
}

pub enum Iter<'a> {
    Map(btree_map::Iter<'a, String, FileRecord>),
    Sorted(std::slice::Iter<'a, (String, FileRecord)>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a FileRecord);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Map(i) => i.next(),
            Iter::Sorted(i) => i.next().map(|(p, r)| (p, r)),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Map(i) => i.size_hint(),
            Iter::Sorted(i) => i.size_hint(),
        }
    }
}

pub enum IterMut<'a> {
    Map(btree_map::IterMut<'a, String, FileRecord>),
    Sorted(std::slice::IterMut<'a, (String, FileRecord)>),
}

impl<'a> Iterator for IterMut<'a> {
    type Item = (&'a String, &'a mut FileRecord);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            IterMut::Map(i) => i.next(),
            IterMut::Sorted(i) => i.next().map(|(p, r)| (&*p, r)),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            IterMut::Map(i) => i.size_hint(),
            IterMut::Sorted(i) => i.size_hint(),
        }
    }
}

impl<'a> IntoIterator for &'a Records {
    type Item = (&'a String, &'a FileRecord);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(blob: &str) -> FileRecord {
        FileRecord {
            blob: blob.into(),
            ..FileRecord::default()
        }
    }

    #[test]
    fn a_sorted_bucket_answers_as_the_map_it_turns_into_when_inserted_out_of_order() {
        let mut sorted = Records::sorted_with_capacity(4);
        let mut map = Records::default();
        for r in [&mut sorted, &mut map] {
            for p in ["a", "c", "e"] {
                assert_eq!(r.insert(p.into(), rec(p)), None);
            }
        }
        assert!(matches!(sorted.0, Repr::Sorted(_)));
        for p in ["e", "a", "c", "b", "z"] {
            assert_eq!(sorted.get(p), map.get(p), "{p}");
        }
        assert_eq!(sorted, map);
        // Replacing a record keeps the order; a path before the last does not.
        assert_eq!(sorted.insert("c".into(), rec("c2")), Some(rec("c")));
        assert!(matches!(sorted.0, Repr::Sorted(_)));
        assert_eq!(sorted.insert("b".into(), rec("b")), None);
        assert!(matches!(sorted.0, Repr::Map(_)));
        let keys: Vec<&String> = sorted.keys().collect();
        assert_eq!(keys, ["a", "b", "c", "e"]);
        assert_eq!(sorted.get("c"), Some(&rec("c2")));
    }

    #[test]
    fn a_lookup_from_any_earlier_position_finds_what_a_binary_search_finds() {
        let v: Vec<(String, FileRecord)> = (0..40)
            .map(|i| (format!("p{:03}", i * 2), FileRecord::default()))
            .collect();
        let wanted: Vec<String> = (0..82).map(|i| format!("p{i:03}")).collect();
        for h in 0..v.len() + 2 {
            for w in wanted.iter().map(String::as_str).chain(["", "a", "z"]) {
                let expected = v.binary_search_by(|(p, _)| p.as_str().cmp(w));
                assert_eq!(Records::find(&v, h, w), expected, "from {h} for {w}");
            }
        }
        assert_eq!(Records::find(&[], 3, "a"), Err(0));
    }

    #[test]
    fn a_removal_from_a_sorted_bucket_leaves_the_others_in_order() {
        let mut r = Records::sorted_with_capacity(3);
        for p in ["a", "b", "c"] {
            r.insert(p.into(), rec(p));
        }
        assert_eq!(r.remove("x"), None);
        assert_eq!(r.remove("b"), Some(rec("b")));
        assert_eq!(r.len(), 2);
        for (_, rec) in r.iter_mut() {
            rec.evaluations = 1;
        }
        let keys: Vec<&String> = r.keys().collect();
        assert_eq!(keys, ["a", "c"]);
        assert!(r.iter().all(|(_, rec)| rec.evaluations == 1));
    }
}
