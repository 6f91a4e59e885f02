//! RDB (and DUMP) and digest I/O as the codec's [`Sink`] and [`Source`].

use std::ffi::{c_char, c_longlong};

use redis_module::raw;

use crate::codec::{DecodeError, Sink, Source};

/// RDB (and DUMP) I/O as an encoding [`Sink`] and [`Source`].
pub struct Rdb(pub *mut raw::RedisModuleIO);

impl Sink for Rdb {
    fn unsigned(&mut self, value: u64) {
        raw::save_unsigned(self.0, value);
    }
    fn signed(&mut self, value: i64) {
        raw::save_signed(self.0, value);
    }
    fn buffer(&mut self, bytes: &[u8]) {
        raw::save_slice(self.0, bytes);
    }
}

impl Source for Rdb {
    fn unsigned(&mut self) -> Result<u64, DecodeError> {
        raw::load_unsigned(self.0).map_err(|_| DecodeError::Io)
    }
    fn signed(&mut self) -> Result<i64, DecodeError> {
        raw::load_signed(self.0).map_err(|_| DecodeError::Io)
    }
    fn buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        raw::load_string_buffer(self.0)
            .map(|b| b.as_ref().to_vec())
            .map_err(|_| DecodeError::Io)
    }
}

/// DEBUG DIGEST as an encoding [`Sink`]: the digest covers exactly what is saved.
pub struct Digest(pub *mut raw::RedisModuleDigest);

impl Sink for Digest {
    fn unsigned(&mut self, value: u64) {
        self.signed(value as i64);
    }
    fn signed(&mut self, value: i64) {
        // SAFETY: `self.0` is the digest Redis passed to the callback.
        unsafe {
            if let Some(f) = raw::RedisModule_DigestAddLongLong {
                f(self.0, value as c_longlong);
            }
        }
    }
    fn buffer(&mut self, bytes: &[u8]) {
        // SAFETY: as above; the buffer is valid for `bytes.len()` bytes.
        unsafe {
            if let Some(f) = raw::RedisModule_DigestAddStringBuffer {
                f(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len());
            }
        }
    }
}

impl Digest {
    pub fn end_sequence(&mut self) {
        // SAFETY: as above.
        unsafe {
            if let Some(f) = raw::RedisModule_DigestEndSequence {
                f(self.0);
            }
        }
    }
}
