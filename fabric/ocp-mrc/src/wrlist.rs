//! Work-request lists from C: a verbs-shaped post call follows the application's `next`
//! pointers, and a list that loops back on itself must be refused, not posted round and
//! round until the queue is full (or for ever, without a queue depth).

/// Whether the list from `wr` (linked by `next`) loops back on itself within its first
/// `limit` requests (Brent's cycle detection: at most `4 * limit` steps, no memory).
///
/// # Safety
/// `wr` NULL or a list of live work requests.
pub(crate) unsafe fn is_circular<W>(
    wr: *const W,
    next: &impl Fn(&W) -> *const W,
    limit: usize,
) -> bool {
    let (mut power, mut lam) = (1usize, 1usize);
    let mut tortoise = wr;
    // SAFETY: live requests (the caller's contract).
    let Some(first) = (unsafe { wr.as_ref() }) else {
        return false;
    };
    let mut hare = next(first);
    let mut steps = 0usize;
    while !hare.is_null() {
        if hare == tortoise {
            return true;
        }
        steps += 1;
        if steps > 4 * limit {
            return false;
        }
        if power == lam {
            tortoise = hare;
            power *= 2;
            lam = 0;
        }
        // SAFETY: non-null, live (the caller's contract).
        hare = next(unsafe { &*hare });
        lam += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::is_circular;
    use std::ptr::null;

    struct Node {
        next: *const Node,
    }

    /// A list of `n` nodes whose last links back to node `back` (none: a plain list).
    fn list(n: usize, back: Option<usize>) -> Vec<Node> {
        let mut v: Vec<Node> = (0..n).map(|_| Node { next: null() }).collect();
        let base: *const Node = v.as_ptr();
        for (i, node) in v.iter_mut().enumerate() {
            node.next = if i + 1 < n {
                // SAFETY: inside the vector.
                unsafe { base.add(i + 1) }
            } else {
                // SAFETY: inside the vector.
                back.map_or(null(), |b| unsafe { base.add(b) })
            };
        }
        v
    }

    #[test]
    fn loops_are_found_and_plain_lists_are_not() {
        let next = |n: &Node| n.next;
        assert!(!unsafe { is_circular(null::<Node>(), &next, 10) });
        for n in 1..40 {
            let plain = list(n, None);
            assert!(!unsafe { is_circular(plain.as_ptr(), &next, n + 1) }, "{n}");
            for back in 0..n {
                let l = list(n, Some(back));
                assert!(
                    unsafe { is_circular(l.as_ptr(), &next, n + 1) },
                    "{n} {back}"
                );
            }
        }
        // a loop beyond the limit is not looked for (the queue stops the list there)
        let l = list(100, Some(50));
        assert!(!unsafe { is_circular(l.as_ptr(), &next, 10) });
    }
}
