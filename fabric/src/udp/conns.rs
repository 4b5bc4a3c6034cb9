//! [`ConnTable`]: the open connections of one datapath and the route of each of their EVs,
//! the bookkeeping the fake, io_uring and verbs datapaths share. A datapath keeps its own
//! per-connection state `C` (peer and port leases, EV sockets, predicted source ports) and
//! per-EV route `R` (a socket index, a QP and address handle); the table hands out
//! [`ConnId`]s and resolves a [`TxBatch`] datagram's `(conn, ev)` to them.

use crate::datapath::{ConnId, DatapathError, TxBatch, TxDatagram, TxMeta};
use rustc_hash::FxHashMap;

// Both maps are looked up once per datagram sent, with keys this process chose (connection
// ids it handed out, EVs of its own configuration), never bytes from the network: a fast
// non-keyed hash (FxHash) in place of SipHash, which took about 1% of an engine's samples
// in `tx_burst` (`perf record`, mrc-perf loopback --verify).
struct Entry<C, R> {
    conn: C,
    routes: FxHashMap<u32, R>,
}

/// Connections by [`ConnId`], each with its EV -> route map. Ids count up from 0 and wrap
/// at `u32::MAX`; after the wrap an id still open is skipped (a long-lived connection is
/// never handed the id, and with it the sockets, of a new one).
pub(crate) struct ConnTable<C, R> {
    conns: FxHashMap<ConnId, Entry<C, R>>,
    next: u32,
}

impl<C, R> Default for ConnTable<C, R> {
    fn default() -> Self {
        ConnTable {
            conns: FxHashMap::default(),
            next: 0,
        }
    }
}

impl<C, R> ConnTable<C, R> {
    /// Adds a connection with the route of each of its EVs; returns its new id: the next
    /// in the count that is not open. (All 2^32 ids open at once cannot happen: a fake or
    /// UDP connection holds at least one of 65536 source ports, a verbs one a route per
    /// EV; the table would outgrow any process.)
    pub(crate) fn insert(&mut self, conn: C, routes: impl IntoIterator<Item = (u32, R)>) -> ConnId {
        while self.conns.contains_key(&ConnId(self.next)) {
            self.next = self.next.wrapping_add(1);
        }
        let id = ConnId(self.next);
        self.next = self.next.wrapping_add(1);
        let routes = routes.into_iter().collect();
        self.conns.insert(id, Entry { conn, routes });
        id
    }

    /// Forgets a connection (dropping its state: sockets close, port leases return).
    pub(crate) fn remove(&mut self, id: ConnId) {
        self.conns.remove(&id);
    }

    /// The state of connection `id`.
    pub(crate) fn get(&self, id: ConnId) -> Option<&C> {
        self.conns.get(&id).map(|e| &e.conn)
    }

    /// Connections open.
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// The state of connection `id` and the route of its EV `ev`.
    ///
    /// # Errors
    /// [`DatapathError::UnknownConn`] when `id` is not open, else
    /// [`DatapathError::UnknownEv`] when `ev` is not one of its EVs.
    pub(crate) fn route(&self, id: ConnId, ev: u32) -> Result<(&C, &R), DatapathError> {
        let e = self.conns.get(&id).ok_or(DatapathError::UnknownConn(id))?;
        let r = e
            .routes
            .get(&ev)
            .ok_or(DatapathError::UnknownEv { conn: id, ev })?;
        Ok((&e.conn, r))
    }

    /// Resolves every datagram of `batch` in order, calling `f(index, meta, bytes, conn,
    /// route)` for each.
    ///
    /// # Errors
    /// As [`ConnTable::route`], at the first datagram that names an unknown connection or
    /// EV (`f` has seen the datagrams before it; the caller sends nothing of the batch).
    pub(crate) fn resolve<'b>(
        &self,
        batch: &'b TxBatch,
        mut f: impl FnMut(usize, TxMeta, TxDatagram<'b>, &C, &R),
    ) -> Result<(), DatapathError> {
        for i in 0..batch.len() {
            let Some((m, bytes)) = batch.get(i) else {
                continue;
            };
            let (c, r) = self.route(m.conn, m.ev)?;
            f(i, m, bytes, c, r);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mrc_transport::Ecn;
    use std::collections::HashMap;

    fn table() -> ConnTable<&'static str, usize> {
        let mut t = ConnTable::default();
        assert_eq!(t.insert("a", HashMap::from([(7, 0), (9, 1)])), ConnId(0));
        assert_eq!(t.insert("b", HashMap::from([(7, 2)])), ConnId(1));
        t
    }

    #[test]
    fn ids_count_up_and_survive_removal() {
        let mut t = table();
        t.remove(ConnId(0));
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(ConnId(0)), None);
        assert_eq!(t.get(ConnId(1)), Some(&"b"));
        assert_eq!(t.insert("c", HashMap::new()), ConnId(2));
    }

    #[test]
    fn wrapped_ids_skip_the_ones_still_open() {
        let mut t = table();
        t.next = u32::MAX - 1;
        assert_eq!(t.insert("x", HashMap::new()), ConnId(u32::MAX - 1));
        t.remove(ConnId(u32::MAX - 1));
        assert_eq!(t.insert("y", HashMap::new()), ConnId(u32::MAX));
        // 0 and 1 are still open ("a", "b"): the next id is 2, and "a" keeps its routes.
        assert_eq!(t.insert("z", HashMap::new()), ConnId(2));
        assert_eq!(t.len(), 4);
        assert_eq!(t.route(ConnId(0), 9).ok(), Some((&"a", &1)));
        assert_eq!(t.get(ConnId(1)), Some(&"b"));
        assert_eq!(t.get(ConnId(u32::MAX)), Some(&"y"));
        // The freed u32::MAX - 1 comes round again only after every other id.
        assert_eq!(t.insert("w", HashMap::new()), ConnId(3));
    }

    #[test]
    fn route_names_conn_before_ev() {
        let t = table();
        assert_eq!(t.route(ConnId(0), 9).ok(), Some((&"a", &1)));
        assert_eq!(t.route(ConnId(1), 7).ok(), Some((&"b", &2)));
        assert!(matches!(
            t.route(ConnId(5), 7),
            Err(DatapathError::UnknownConn(ConnId(5)))
        ));
        assert!(matches!(
            t.route(ConnId(1), 9),
            Err(DatapathError::UnknownEv {
                conn: ConnId(1),
                ev: 9
            })
        ));
    }

    #[test]
    fn resolve_stops_at_first_unknown() {
        let t = table();
        let mut batch = TxBatch::new(4, 8);
        assert!(batch.push(ConnId(1), 7, Ecn::NotEct, b"xy"));
        assert!(batch.push(ConnId(0), 9, Ecn::Ect0, b"z"));
        let mut seen = Vec::new();
        let r = t.resolve(&batch, |i, m, bytes, c, r| {
            seen.push((i, m.ev, bytes.to_vec(), *c, *r))
        });
        assert!(r.is_ok());
        assert_eq!(
            seen,
            vec![
                (0, 7, b"xy".to_vec(), "b", 2),
                (1, 9, b"z".to_vec(), "a", 1)
            ]
        );
        assert!(batch.push(ConnId(0), 8, Ecn::NotEct, b"w"));
        assert!(batch.push(ConnId(0), 7, Ecn::NotEct, b"v"));
        seen.clear();
        let r = t.resolve(&batch, |i, _, _, _, _| seen.push((i, 0, Vec::new(), "", 0)));
        assert!(matches!(
            r,
            Err(DatapathError::UnknownEv {
                conn: ConnId(0),
                ev: 8
            })
        ));
        assert_eq!(seen.len(), 2);
    }
}
