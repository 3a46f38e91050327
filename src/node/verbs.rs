//! The compute node over the verbs fabric: the service a memory node runs, and the fake
//! device's memory node shared by the pollers (feature `verbs`).
use super::NodeConfig;
use super::error::Error;
use super::index::Service;
use super::lives::Gate;
use crate::verbs::qp::RECV_LEN;
use crate::verbs::{ConnectOptions, FakeEndpoint, FakeNode, VerbsQp, connect_qp};
use remora_core::fabric::{Endpoint, FabricError};
use remora_core::server::{Echo, Handler};
use remora_layouts::NodeId;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The service of the first memory node of `addrs`, asked over one probe connection.
pub(super) fn service_of(addrs: &[String], options: &ConnectOptions) -> Result<String, Error> {
    let first = addrs
        .first()
        .ok_or_else(|| Error::Config("no verbs memory node to connect to".into()))?;
    let (qp, info) = connect_qp(first, options).map_err(Error::Verbs)?;
    drop(qp);
    Ok(info.service)
}

/// The handler a fake memory node of `config` runs for `service` (`echo` for none, as
/// `remora memnode` runs).
pub(super) fn fake_handler(
    config: &NodeConfig,
    service: &Service,
) -> Result<Box<dyn Handler + Send>, Error> {
    Ok(service
        .handler(config.region_len, config.chunk_size, RECV_LEN)?
        .unwrap_or_else(|| Box::new(Echo)))
}

/// One memory node on the fake device, shared by every poller of a compute node: each
/// connects its own endpoint (one queue pair, its own client id) to it.
///
/// The fake device is single-threaded by design (its node is `Rc`-shared, its service in a
/// `RefCell`, and work requests run at post time on the posting thread). Shared across
/// pollers, it is used under [`Gate`]: a poller holds the gate whenever its code can reach
/// the device (it runs tasks, connects, drops handles or its endpoint).
pub(super) struct SharedFake {
    node: Rc<FakeNode>,
    service: String,
    gate: Gate,
    /// Endpoints connected so far: the next one is the node's connection of that number.
    connected: AtomicU32,
}

// SAFETY: `node` (its reference count, its service's `RefCell`, its region) is only used
// with `gate` held, by one thread at a time: `endpoint` clones it under the gate, the pollers
// post and drop their queue pairs (which hold clones) under it (see `lives.rs` and
// `poller::drive`), and the last `SharedFake` reference is dropped after every poller thread
// has ended (`Inner::drop` joins them; they hold it through an `Arc`). The handler is made
// `Send` (`fake_handler`).
unsafe impl Send for SharedFake {}
// SAFETY: as above: every use through `&SharedFake` takes the gate first.
unsafe impl Sync for SharedFake {}

impl SharedFake {
    /// A fake memory node of `config` running `service`.
    pub(super) fn new(config: &NodeConfig, service: &Service) -> Result<Arc<SharedFake>, Error> {
        let handler = fake_handler(config, service)?;
        let name = handler.service().to_string();
        let node = FakeNode::new(
            config.node_id,
            config.region_len,
            config.chunk_size,
            config.dm_len,
            handler,
        )
        .map_err(Error::Verbs)?;
        Ok(Arc::new(SharedFake {
            node,
            service: name,
            gate: Gate::default(),
            connected: AtomicU32::new(0),
        }))
    }

    /// The service the node runs.
    pub(super) fn service(&self) -> String {
        self.service.clone()
    }

    /// The gate every use of the device takes.
    pub(super) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// A new endpoint on the node, on the calling (poller) thread. The caller holds the gate.
    pub(super) fn endpoint(&self) -> Result<FakeOn, Error> {
        let ep = FakeEndpoint::connect(std::slice::from_ref(&self.node)).map_err(Error::Verbs)?;
        // The device numbers its connections from 0 and tells the service each one's
        // client as its number + 1: this endpoint's, as over real verbs.
        let client = self.connected.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(FakeOn { ep, client })
    }
}

/// A poller's endpoint on the shared fake node: the fake device's endpoint, under the
/// client id the node knows this connection by (the fake endpoint alone says 1 for all).
pub(super) struct FakeOn {
    ep: FakeEndpoint,
    client: u32,
}

impl Endpoint for FakeOn {
    type Qp = VerbsQp;

    fn qp(&self, node: NodeId) -> Result<&VerbsQp, FabricError> {
        self.ep.qp(node)
    }

    fn nodes(&self) -> &[NodeId] {
        self.ep.nodes()
    }

    fn now_ns(&self) -> u64 {
        self.ep.now_ns()
    }

    fn client_id(&self) -> u32 {
        self.client
    }

    fn pause(&self, ns: u64) -> impl std::future::Future<Output = ()> {
        self.ep.pause(ns)
    }
}
