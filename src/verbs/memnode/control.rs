//! Connection control of the verbs memory node: rdma_cm connect requests (connections,
//! key revocations, fences; see the parent module's docs), accepts and disconnects.
use super::*;

impl Memnode {
    /// Cuts client `client` off this node (see the module docs); returns how many of its
    /// connections were cut. An error means one of its queue pairs could not be moved to the
    /// error state: the client is not known to be fenced.
    pub fn fence(&mut self, client: u32) -> Result<u32, VerbsError> {
        if client == 0 {
            return Err(VerbsError::Protocol {
                addr: self.cfg.listen.clone(),
                why: "a fence must name a client (id 0 names none)",
            });
        }
        self.fenced.insert(client);
        let region = local_region(&self.region, self.cfg.node);
        let mut cut = 0;
        for c in self
            .ctls
            .iter()
            .filter(|c| c.client == client && !c.dead.load(Ordering::Acquire))
        {
            let mut attr = sys::ibv_qp_attr {
                qp_state: sys::IBV_QPS_ERR,
                ..Default::default()
            };
            // SAFETY: the queue pair is live while its `Ctl` is listed (its server thread
            // drops it only after this thread marks it gone); moving a queue pair to the
            // error state is always allowed, from any thread.
            let rc = unsafe { sys::ibv_modify_qp(c.qp, &mut attr, sys::IBV_QP_STATE as i32) };
            if rc != 0 {
                return Err(VerbsError::Sys {
                    what: "ibv_modify_qp to the error state (fencing a client)",
                    errno: rc.abs(),
                });
            }
            c.dead.store(true, Ordering::Release);
            // SAFETY: the connection's id is live (as above); disconnecting twice (again on
            // release) is harmless.
            unsafe { sys::rdma_disconnect(c.cm_id) };
            // Its handler learns of it before the fence is answered: here when its thread
            // serves with the node's handler, else (a forked handler) on its thread's next
            // round.
            let forked = self.forked.get(self.hub.owner(c.id)).copied();
            if !forked.unwrap_or(false) && !c.told.swap(true, Ordering::AcqRel) {
                lock(&self.handler).on_disconnect(&region, c.id);
            }
            cut += 1;
        }
        Ok(cut)
    }

    /// The level of the node's per-connection lines: info with `verbose` (the command's
    /// logger shows it), else debug (`REMORA_LOG=debug`).
    pub(super) fn chatter(&self) -> log::Level {
        if self.cfg.verbose {
            log::Level::Info
        } else {
            log::Level::Debug
        }
    }

    /// The id of a connecting client: the one it claims, or (0) a fresh one.
    /// (A listed client's id, proved by the gate, is never given to another.)
    fn client_for(&self, claimed: u32) -> u32 {
        if claimed != 0 {
            return claimed;
        }
        let mut n = self.connections + 1;
        loop {
            let id = (self.cfg.node as u32 & 0xff) << 24 | (n & 0xff_ffff).max(1) as u32;
            if !self.gate.as_ref().is_some_and(|g| g.lists(id)) {
                return id;
            }
            n += 1;
        }
    }

    /// Registers the region again under a new key on every device, then releases the old
    /// registrations (so the new key differs from the old). Returns the first device's key.
    pub fn revoke_key(&mut self) -> Result<u32, VerbsError> {
        let mut key = 0;
        for (i, d) in self.devs.iter_mut().enumerate() {
            // SAFETY: the region arena outlives the registration (field order).
            let fresh = unsafe {
                Mr::register(
                    &d.pd,
                    self.region.as_ptr(),
                    self.cfg.region_len as usize,
                    REMOTE,
                )?
            };
            if i == 0 {
                key = fresh.rkey();
            }
            drop(std::mem::replace(&mut d.region_mr, fresh));
        }
        Ok(key)
    }

    fn reject(id: *mut sys::rdma_cm_id, data: &[u8]) {
        // SAFETY: a connect-request id this node owns; the data lives through the call; the
        // id is destroyed once, after its event was acknowledged.
        unsafe {
            sys::rdma_reject(id, data.as_ptr().cast(), data.len() as u8);
            sys::rdma_destroy_id(id);
        }
    }

    fn on_connect_request(&mut self, ev: &Event) {
        if let Some(gate) = &mut self.gate
            && let Err(why) = gate.admit_now(&ev.private)
        {
            let u = Unauthorized { why };
            log::warn!("memnode: refused a request for its key: {why:?} (--key-file)");
            return Self::reject(ev.id, &u.encode());
        }
        let hello = match Hello::decode(&ev.private) {
            Ok(h) => h,
            Err(why) => {
                log::log!(self.chatter(), "memnode: refused a connection: {why}");
                return Self::reject(ev.id, &[]);
            }
        };
        if hello.request == Request::Fence {
            match self.fence(hello.client) {
                Ok(n) => {
                    log::log!(
                        self.chatter(),
                        "memnode: client {:#x} fenced ({n} connections cut)",
                        hello.client
                    );
                    let f = Fenced {
                        client: hello.client,
                        connections: n,
                    };
                    Self::reject(ev.id, &f.encode())
                }
                Err(e) => {
                    log::warn!("memnode: fencing client {:#x} failed: {e}", hello.client);
                    Self::reject(ev.id, &[])
                }
            }
            return;
        }
        if hello.request == Request::RevokeKey {
            match self.revoke_key() {
                Ok(k) => {
                    log::log!(
                        self.chatter(),
                        "memnode: region key revoked; new key {k:#x}"
                    );
                    Self::reject(ev.id, &Revoked { new_rkey: k }.encode())
                }
                Err(e) => {
                    log::warn!("memnode: key revocation failed: {e}");
                    Self::reject(ev.id, &[])
                }
            }
            return;
        }
        if let Err(e) = self.accept(ev, hello) {
            log::warn!("memnode: could not accept a connection: {e}");
        }
    }

    fn accept(&mut self, ev: &Event, hello: Hello) -> Result<(), VerbsError> {
        // SAFETY: a connect-request id has its device context.
        let ctx = unsafe { (*ev.id).verbs };
        // SAFETY: as above, with its port.
        let port = unsafe { (*ev.id).port_num };
        let dev = match self
            .device(ctx)
            .and_then(|d| check_port(ctx, port).map(|()| d))
        {
            Ok(d) => d,
            Err(e) => {
                Self::reject(ev.id, &[]);
                return Err(e);
            }
        };
        if self.fenced.contains(&hello.client) {
            log::warn!(
                "memnode: refused client {:#x}: it was fenced and may not come back under its id",
                hello.client
            );
            Self::reject(ev.id, &[]);
            return Ok(());
        }
        let client = self.client_for(hello.client);
        let d = &self.devs[dev];
        set_ack_timeout(ev.id);
        let shard = self.hub.owner(self.connections as usize + 1);
        let srq = d.srqs[shard % d.srqs.len()].clone();
        let (srq_raw, recv_cq) = srq.raw();
        let before = self.per_connection.is_none().then(process_memory);
        let mut qp = VerbsQp::create_shared(
            CmId(ev.id),
            d.pd.borrowed(),
            self.cfg.node,
            srq_raw,
            recv_cq,
        )?;
        if let Some(Some(b)) = before {
            self.per_connection = process_memory().map(|a| a.saturating_sub(b));
        }
        qp.set_peer(self.cfg.node, Default::default(), hello.recv_len as usize);
        let w = self.welcome(d, client).encode();
        let mut param = sys::rdma_conn_param {
            private_data: w.as_ptr().cast(),
            private_data_len: w.len() as u8,
            responder_resources: ev.initiator_depth.min(d.rd),
            initiator_depth: ev.responder_resources.min(d.init_rd),
            retry_count: TRANSPORT_RETRIES,
            rnr_retry_count: 6,
            ..Default::default()
        };
        // The connection goes to its server thread before it is accepted: once accepted, the
        // client may send at once, and a message on a queue pair its thread does not know
        // yet would be taken for the last packet of a released one and dropped (the client
        // then waits for a reply that never comes).
        let cm_id = qp.cm_id();
        self.connections += 1;
        let ctl = Arc::new(Ctl {
            id: self.connections as usize,
            client,
            cm_id,
            qp: qp.raw_qp(),
            dead: AtomicBool::new(false),
            told: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            rnr: AtomicBool::new(false),
        });
        self.ctls.push(ctl.clone());
        // Its thread introduces it to the handler before serving any message of it.
        self.hub.hand_over(Conn {
            qp,
            ctl: ctl.clone(),
            srq,
            introduced: false,
        });
        // SAFETY: the id has its queue pair (owned by the connection just handed over, which
        // is released only once its `Ctl` is marked gone, below or on an rdma_cm event);
        // `param` and its private data live through the call.
        if unsafe { sys::rdma_accept(cm_id, &mut param) } != 0 {
            let e = sys_err("rdma_accept");
            if let Some(i) = self.ctls.iter().position(|c| Arc::ptr_eq(c, &ctl)) {
                self.ctls.swap_remove(i);
            }
            // Its server thread releases it (and tells its handler).
            ctl.dead.store(true, Ordering::Release);
            ctl.gone.store(true, Ordering::Release);
            return Err(e);
        }
        // If the queue pair is not in RTS yet, again when the connection is established.
        // The queue pair is live while its `Ctl` is listed (as for the ESTABLISHED event).
        if crate::verbs::qp::set_min_rnr_timer(ctl.qp) {
            ctl.rnr.store(true, Ordering::Relaxed);
            self.rnr_set += 1;
        }
        log::log!(
            self.chatter(),
            "memnode: client {} connected ({} open)",
            self.connections,
            self.ctls.len()
        );
        Ok(())
    }

    pub(super) fn on_event(&mut self, ev: Event) -> Result<(), VerbsError> {
        match ev.kind {
            sys::RDMA_CM_EVENT_CONNECT_REQUEST => self.on_connect_request(&ev),
            sys::RDMA_CM_EVENT_ESTABLISHED => {
                if let Some(c) = self.ctls.iter().find(|c| c.cm_id == ev.id)
                    && !c.rnr.load(Ordering::Relaxed)
                    && !c.dead.load(Ordering::Acquire)
                    // The queue pair is live while its `Ctl` is listed (see `fence`).
                    && crate::verbs::qp::set_min_rnr_timer(c.qp)
                {
                    c.rnr.store(true, Ordering::Relaxed);
                    self.rnr_set += 1;
                }
            }
            sys::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                return Err(VerbsError::Sys {
                    what: "the RDMA device was removed",
                    errno: libc::ENODEV,
                });
            }
            _ => {
                // Disconnected, timed out, or failed: its server thread releases it (and
                // tells its handler); this thread touches it no more.
                if let Some(i) = self.ctls.iter().position(|c| c.cm_id == ev.id) {
                    self.ctls.swap_remove(i).gone.store(true, Ordering::Release);
                }
            }
        }
        Ok(())
    }
}

/// This process's resident plus hugetlb memory in bytes (`/proc/self/status`), if readable.
pub(super) fn process_memory() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some((kib("VmRSS:")? + kib("HugetlbPages:").unwrap_or(0)) << 10)
}
