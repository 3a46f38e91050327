//! The compute node over the verbs fabric: the service a memory node runs, and the fake
//! device's endpoint (feature `verbs`).
use super::NodeConfig;
use super::error::Error;
use super::index::Service;
use crate::verbs::qp::RECV_LEN;
use crate::verbs::{ConnectOptions, FakeEndpoint, FakeNode, connect_qp};
use remora_core::server::{Echo, Handler};

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

/// A memory node on the fake device, made on the calling (poller) thread, and an endpoint
/// connected to it. The endpoint's queue pairs hold the node: it lives as long as they do.
pub(super) fn fake_endpoint(config: &NodeConfig, service: &Service) -> Result<FakeEndpoint, Error> {
    let node = FakeNode::new(
        config.node_id,
        config.region_len,
        config.chunk_size,
        config.dm_len,
        fake_handler(config, service)?,
    )
    .map_err(Error::Verbs)?;
    FakeEndpoint::connect(&[node]).map_err(Error::Verbs)
}
