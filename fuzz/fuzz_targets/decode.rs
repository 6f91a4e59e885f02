//! The RDB decoder fed arbitrary bytes: an error or a whole, valid lock.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_unique::codec::{ENCODING_VERSION, ItemReader, Items, RdbBytes, decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(lock) = decode(ENCODING_VERSION, &mut RdbBytes::new(data)) {
        assert!(!lock.is_empty());
        let mut items = Items::default();
        encode(&lock, &mut items);
        let again = decode(ENCODING_VERSION, &mut ItemReader::new(&items));
        assert_eq!(again.as_ref(), Ok(&lock));
    }
});
