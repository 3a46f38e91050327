//! What a client coroutine holds (`ClientCtx`: endpoint, virtual clock, CPU, random
//! stream) and the timers it sleeps on.

use super::*;

/// What a client coroutine sees: its thread's endpoint, the virtual clock, its CPU, and its
/// own seeded random stream.
pub struct ClientCtx {
    pub(super) w: WorldRef,
    pub(super) ep: Rc<SimEndpoint>,
    pub(super) client: u32,
    pub(super) rng: RefCell<Rng>,
}

impl ClientCtx {
    /// Another context on the same client thread with random stream `i`.
    pub fn fork(&self, i: u64) -> ClientCtx {
        let seed = self.w.borrow().seed;
        ClientCtx {
            w: self.w.clone(),
            ep: self.ep.clone(),
            client: self.client,
            rng: RefCell::new(Rng::new(seed, 1 + ((self.client as u64) << 20) + 1 + i)),
        }
    }
    /// This client thread's endpoint: one queue pair per memory node, shared by the
    /// coroutines of the thread.
    pub fn ep(&self) -> &SimEndpoint {
        &self.ep
    }
    /// The same client thread with a fresh endpoint: new queue pairs to every memory node
    /// under each region's current key (after a memory node restarted, the old ones only
    /// time out). The old endpoint's connections end (both sides break; each node's handler
    /// gets `on_disconnect`), as when a client closes its queue pairs.
    pub fn reconnect(&self) -> ClientCtx {
        let ends = {
            let mut w = self.w.borrow_mut();
            for q in self.ep.qps() {
                let server = w.ends[q.end_id() as usize].peer;
                w.end_connection(server, true);
            }
            w.connect(self.client)
        };
        let qps = ends
            .into_iter()
            .map(|e| SimQp::new(self.w.clone(), e))
            .collect();
        let seed = self.w.borrow().seed;
        ClientCtx {
            w: self.w.clone(),
            ep: Rc::new(SimEndpoint::new(qps, self.client)),
            client: self.client,
            rng: RefCell::new(Rng::new(seed, 1 + ((self.client as u64) << 20) + (1 << 19))),
        }
    }
    /// Bytes written to all memory nodes' persistent regions so far (see
    /// [`Sim::nvm_stats`]).
    pub fn nvm_total(&self) -> NvmStats {
        nvm_total(&self.w)
    }
    /// The memory nodes' host regions are persistent memory (`SimConfig::persistent`).
    pub fn persistent(&self) -> bool {
        self.w.borrow().nodes.iter().any(|n| n.persistent)
    }
    /// The queue pair to memory node `node`.
    pub fn qp(&self, node: NodeId) -> Result<&SimQp, FabricError> {
        remora_core::fabric::Endpoint::qp(&*self.ep, node)
    }
    /// This client thread's index in the simulation, counted from 0 in creation order
    /// over all compute nodes (the index [`Faults::crash_client_at_post`] names).
    pub fn client_id(&self) -> u32 {
        self.client
    }
    /// Current virtual time in nanoseconds (rounded down).
    pub fn now_ns(&self) -> u64 {
        self.w.borrow().now / 1000
    }
    /// Current virtual time in picoseconds (the engine's resolution).
    pub fn now_ps(&self) -> Ps {
        self.w.borrow().now
    }
    /// Waits `ns` of virtual time without using the CPU (a timer).
    pub fn sleep(&self, ns: u64) -> Sleep {
        let until = self.w.borrow().now + ns * 1000;
        Sleep {
            w: self.w.clone(),
            until,
            cpu: None,
            armed: false,
            settle: false,
        }
    }
    /// Computes for `ns`: occupies this client thread's CPU (shared with its other
    /// coroutines and with posting), then resumes.
    pub fn cpu(&self, ns: u64) -> Sleep {
        Sleep {
            w: self.w.clone(),
            until: 0,
            cpu: Some((self.client, ns * 1000)),
            armed: false,
            settle: false,
        }
    }
    /// States client CPU work of this coroutine, as
    /// [`Endpoint::charge`](remora_core::fabric::Endpoint::charge) on its endpoint.
    pub fn charge(&self, work: remora_core::work::Work) {
        self.w.borrow_mut().charge(work);
    }
    /// Pays the CPU work this coroutine has stated and not yet paid (its debt) on the
    /// thread's CPU, then resumes: the end of an operation whose last work came after its
    /// last post.
    pub fn settle(&self) -> Sleep {
        Sleep {
            w: self.w.clone(),
            until: 0,
            cpu: None,
            armed: false,
            settle: true,
        }
    }
    /// CPU time all memory nodes' handler threads have been busy so far, in ns (see
    /// [`Sim::server_busy_ns`]).
    pub fn server_busy_ns(&self) -> u64 {
        busy_total_ns(&self.w)
    }
    /// Cache lines the memory nodes' handlers have touched so far (see
    /// [`Sim::server_llc_stats`]).
    pub fn server_llc_total(&self) -> LlcStats {
        llc_total(&self.w)
    }
    /// The next word of this context's random stream (xoshiro256**, derived from the
    /// simulation's seed, the client and the stream: the same seed gives the same words).
    pub fn rand_u64(&self) -> u64 {
        self.rng.borrow_mut().next_u64()
    }
    /// Uniform in `0..n`.
    pub fn rand_below(&self, n: u64) -> u64 {
        self.rng.borrow_mut().below(n)
    }
}

/// A timer of the world `w` firing at virtual time `until`.
pub(crate) fn sleep_until(w: WorldRef, until: Ps) -> Sleep {
    Sleep {
        w,
        until,
        cpu: None,
        armed: false,
        settle: false,
    }
}

/// A pause of `ns` (at least 1) of virtual time that first pays the calling coroutine's CPU
/// debt ([`World::pay_debt`]): the wait begins when that work is done.
pub(crate) fn pause(w: WorldRef, ns: u64) -> Pause {
    Pause { w, ns, sleep: None }
}

/// The future of [`pause`].
pub(crate) struct Pause {
    w: WorldRef,
    ns: u64,
    sleep: Option<Sleep>,
}

impl Future for Pause {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.sleep.is_none() {
            let from = this.w.borrow_mut().pay_debt();
            this.sleep = Some(sleep_until(this.w.clone(), from + this.ns.max(1) * 1000));
        }
        match this.sleep.as_mut() {
            Some(s) => Pin::new(s).poll(cx),
            None => Poll::Ready(()),
        }
    }
}

/// A virtual-time wait (see [`ClientCtx::sleep`], [`ClientCtx::cpu`], [`ClientCtx::settle`]):
/// resolves when the simulation's clock reaches its end. Awaited outside a task of the
/// simulation it resolves at once.
pub struct Sleep {
    w: WorldRef,
    until: Ps,
    cpu: Option<(u32, Ps)>,
    armed: bool,
    /// Pays the task's CPU debt at the first poll ([`ClientCtx::settle`]).
    settle: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut w = this.w.borrow_mut();
        let now = w.now;
        if std::mem::take(&mut this.settle) {
            this.until = w.pay_debt();
        }
        if let Some((c, dur)) = this.cpu.take() {
            let client = &mut w.clients[c as usize];
            let start = client.cpu_free.max(now);
            client.cpu_free = start + dur;
            this.until = start + dur;
        } else if now >= this.until {
            return Poll::Ready(());
        }
        if now >= this.until {
            return Poll::Ready(());
        }
        let t = w.current_task;
        if t == NO_TASK {
            return Poll::Ready(());
        }
        // Its firing marks the coroutine (inside a join), which the join then polls: a
        // sleeping coroutine is not polled when its siblings are.
        if !this.armed {
            this.armed = true;
            let mark = crate::executor::park_current(true);
            w.schedule_timer(this.until, t, mark);
        } else {
            crate::executor::park_current(false);
        }
        Poll::Pending
    }
}
