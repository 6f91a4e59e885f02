//! A GROUP's name with its hash, worked out once when a call names the group.
//!
//! A serving pass, and a LOCK that the waiters may hold back, ask a key how
//! much each waiting group holds, once per group. One hasher for the process
//! (keyed at random, so that chosen names cannot collide on purpose) lets a
//! name be hashed once, when its call arrives, and found by that hash in the
//! key's counts and the waiting side's maps alike.

use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};
use std::ops::Deref;
use std::sync::OnceLock;

/// The hash of a group's name, the same for every key of the process.
pub fn group_hash(name: &[u8]) -> u64 {
    static HASHER: OnceLock<RandomState> = OnceLock::new();
    HASHER.get_or_init(RandomState::new).hash_one(name)
}

/// The number that stands for a group where a key names the groups whose
/// count of holders went down: the name's [`group_hash`], and a number of
/// their own for the holders without a group (should a name hash to it,
/// that name is only named more often than it must be).
pub fn holding_hash(group: Option<&[u8]>) -> u64 {
    group.map_or(NO_GROUP, group_hash)
}

/// [`holding_hash`] of a group given by its [`GroupName`].
pub fn holding_hash_of(group: &Option<GroupName>) -> u64 {
    group.as_ref().map_or(NO_GROUP, GroupName::hash)
}

/// The [`holding_hash`] of the holders without a group.
const NO_GROUP: u64 = 0x9e37_79b9_7f4a_7c15;

/// A group's name and its [`group_hash`]. Equal and ordered as the name
/// is; in a map its hash stands for the name's (a map hashes 8 bytes
/// instead of the name). So it is no `Borrow<[u8]>`: a bare name would hash
/// otherwise, and a map keyed by it is asked with a `GroupName`.
#[derive(Clone)]
pub struct GroupName {
    name: Box<[u8]>,
    hash: u64,
}

impl GroupName {
    pub fn new(name: &[u8]) -> Self {
        Self {
            name: name.into(),
            hash: group_hash(name),
        }
    }

    /// Its [`group_hash`].
    #[inline]
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

impl From<&[u8]> for GroupName {
    fn from(name: &[u8]) -> Self {
        Self::new(name)
    }
}

impl Deref for GroupName {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.name
    }
}

impl PartialEq for GroupName {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.name == other.name
    }
}

impl Eq for GroupName {}

impl PartialOrd for GroupName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GroupName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

impl Hash for GroupName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The hasher of a map keyed by a group (a [`GroupName`], or an `Option` of
/// one): what it hashes is the name's hash, worked out once, which it passes
/// on as it is: a serving pass asks such maps a few times a group, and
/// hashing the keys again (SipHash, and again for every key when a map
/// grows) would cost more than the rest of the lookup. The names' hash is
/// keyed at random, so chosen names do not collide here either. Only for
/// such keys: other bytes are mixed in plainly (an `Option`'s tag is).
#[derive(Default, Clone, Copy)]
pub struct GroupHasher(u64);

impl Hasher for GroupHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 ^= hash;
    }
}

/// Builds a `GroupHasher`: `HashMap<Option<GroupName>, V, ByGroupName>`.
pub type ByGroupName = BuildHasherDefault<GroupHasher>;

impl fmt::Debug for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_hashes_the_same_wherever_it_is_made() {
        let a = GroupName::new(b"tenant-1");
        let b: GroupName = (&b"tenant-1"[..]).into();
        assert_eq!(a, b);
        assert_eq!(a.hash(), group_hash(b"tenant-1"));
        assert_ne!(a, GroupName::new(b"tenant-2"));
        assert!(GroupName::new(b"a") < GroupName::new(b"b"));
        assert_eq!(&*a, b"tenant-1");
    }

    #[test]
    fn a_map_of_groups_hashes_each_name_as_its_own_hash() {
        let hash = |g: &Option<GroupName>| ByGroupName::default().hash_one(g);
        let a = Some(GroupName::new(b"tenant-1"));
        let b = Some(GroupName::new(b"tenant-2"));
        assert_eq!(hash(&a), hash(&a.clone()));
        assert_ne!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&None));
        // The name's hash, as it is but for the tag's bits mixed in.
        let name = a.as_ref().map_or(0, GroupName::hash);
        assert_eq!((hash(&a) ^ name).count_ones(), 1, "the tag's one bit");
        let mut map: std::collections::HashMap<Option<GroupName>, u32, ByGroupName> =
            std::collections::HashMap::default();
        for i in 0..1000u32 {
            map.insert(Some(GroupName::new(&i.to_be_bytes())), i);
        }
        map.insert(None, 1000);
        assert_eq!(
            map.get(&Some(GroupName::new(&7u32.to_be_bytes()))),
            Some(&7)
        );
        assert_eq!(map.get(&None), Some(&1000));
    }
}
