//! Source bytes lent in place to a datapath that sends them without a copy (a gathered
//! send: the headers from the caller's buffer, the payload from the region, as a NIC's DMA
//! reads a work request's scatter/gather list).

/// `len` bytes of a registered region, lent by [`crate::Connection::poll_transmit_gather`]:
/// the payload of one data packet, where it lies. Only a pointer and a length: reading
/// the bytes is `unsafe` ([`PayloadRef::bytes`]), because the borrow has left the region
/// table.
///
/// Valid while the region stays registered and the table is not touched mutably (no
/// register, deregister, `bytes_mut`, no datagram handled): the engine sends a batch
/// before it does any of those. Like a verbs send, the bytes on the wire are those in
/// memory when the datapath copies them; a source modified before the send completes
/// sends undefined bytes (IBA 1.4 section 10.8.3, the consumer owns the buffer only
/// after the completion), never bytes outside the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadRef {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a pointer and a length, no access; reading goes through the `unsafe`
// `PayloadRef::bytes`, whose caller vouches for the memory on the thread that reads it.
#[allow(unsafe_code)]
unsafe impl Send for PayloadRef {}

impl PayloadRef {
    /// The bytes of `s`, lent (safe: nothing is read until [`PayloadRef::bytes`], whose
    /// caller answers for `s` still being there).
    pub fn of(s: &[u8]) -> Self {
        PayloadRef {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }

    /// Bytes lent.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No bytes lent (a zero-length message's packet).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte's address (for an `iovec`).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The bytes.
    ///
    /// # Safety
    /// The region they were lent from is still registered, its table has not been used
    /// mutably since (see the type's docs), and nothing writes the range while the result
    /// lives.
    #[allow(unsafe_code)]
    pub unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the range was a live `&[u8]` of the region when lent; the caller vouches
        // that it still is.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lends_pointer_and_length_of_the_slice() {
        let v = [1u8, 2, 3, 4, 5];
        let p = PayloadRef::of(&v[1..4]);
        assert_eq!(p.len(), 3);
        assert!(!p.is_empty());
        assert_eq!(p.as_ptr(), v[1..].as_ptr());
        // SAFETY: `v` lives and is not written.
        #[allow(unsafe_code)]
        let b = unsafe { p.bytes() };
        assert_eq!(b, &[2, 3, 4]);
        let e = PayloadRef::of(&v[5..]);
        assert!(e.is_empty());
        #[allow(unsafe_code)]
        let b = unsafe { e.bytes() };
        assert_eq!(b, &[] as &[u8]);
    }
}
