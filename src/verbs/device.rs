//! Finding an RDMA device and checking it can be used, before any connection is tried, so
//! that the common failures (no device, no permission, port down) get their own message.
use super::error::{VerbsError, errno, sys_err};
use super::sys;
use std::ffi::CStr;

/// What the checks found about the device a fabric will use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    /// The device's name as rdma-core lists it (`rdma link show`, e.g. `mlx5_0`, `rxe0`).
    pub name: String,
    /// The first ACTIVE port.
    pub port: u8,
    /// On-chip (device) memory the NIC offers, in bytes (0: none).
    pub max_dm: u64,
    /// READs/atomics a queue pair may have outstanding as responder (`max_qp_rd_atom`, at most 16).
    pub max_rd_atom: u8,
    /// READs/atomics a queue pair may have outstanding as initiator (`max_qp_init_rd_atom`, at
    /// most 16).
    pub max_init_rd_atom: u8,
}

const SYSFS_VERBS: &str = "/sys/class/infiniband_verbs";

/// True when the kernel exposes at least one verbs device.
fn sysfs_has_devices() -> bool {
    match std::fs::read_dir(SYSFS_VERBS) {
        Ok(dir) => dir
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("uverbs")),
        Err(_) => false,
    }
}

fn port_state_name(s: sys::ibv_port_state) -> &'static str {
    match s {
        sys::IBV_PORT_DOWN => "DOWN",
        sys::IBV_PORT_INIT => "INIT",
        sys::IBV_PORT_ARMED => "ARMED",
        sys::IBV_PORT_ACTIVE => "ACTIVE",
        sys::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "in no known state",
    }
}

/// The device name of an open context.
pub(crate) fn context_name(ctx: *mut sys::ibv_context) -> String {
    // SAFETY: `ctx` is an open device context (checked non-null by callers); the name is a
    // NUL-terminated string owned by the device list entry, valid while the context is open.
    unsafe {
        let name = sys::ibv_get_device_name((*ctx).device);
        if name.is_null() {
            return "<unnamed>".into();
        }
        CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

/// State of `port` of an open context.
pub(crate) fn port_state(
    ctx: *mut sys::ibv_context,
    port: u8,
) -> Result<sys::ibv_port_state, VerbsError> {
    let mut attr = sys::ibv_port_attr::default();
    // SAFETY: `ctx` is an open context and `attr` a valid out-parameter of the right type.
    let rc = unsafe { sys::___ibv_query_port(ctx, port, &mut attr) };
    if rc != 0 {
        return Err(VerbsError::Sys {
            what: "ibv_query_port",
            errno: rc,
        });
    }
    Ok(attr.state)
}

/// Fails with [`VerbsError::PortDown`] unless `port` of `ctx` is ACTIVE.
pub(crate) fn check_port(ctx: *mut sys::ibv_context, port: u8) -> Result<(), VerbsError> {
    let state = port_state(ctx, port)?;
    if state == sys::IBV_PORT_ACTIVE {
        return Ok(());
    }
    Err(VerbsError::PortDown {
        device: context_name(ctx),
        port,
        state: port_state_name(state),
    })
}

/// Limits of an open context: (ports, max_rd_atom, max_init_rd_atom, max_dm bytes).
pub(crate) fn limits(ctx: *mut sys::ibv_context) -> Result<(u8, u8, u8, u64), VerbsError> {
    let mut attr = sys::ibv_device_attr_ex::default();
    // SAFETY: `ctx` is open; a null input struct asks for the default query; `attr` is a
    // valid out-parameter of the size the call expects.
    let rc = unsafe { sys::ibv_query_device_ex(ctx, std::ptr::null(), &mut attr) };
    if rc != 0 {
        // Providers without the extended query: fall back to the basic one, no DM.
        let mut basic = sys::ibv_device_attr::default();
        // SAFETY: as above, for the basic query.
        let rc = unsafe { sys::ibv_query_device(ctx, &mut basic) };
        if rc != 0 {
            return Err(VerbsError::Sys {
                what: "ibv_query_device",
                errno: rc,
            });
        }
        attr.orig_attr = basic;
        attr.max_dm_size = 0;
    }
    let o = &attr.orig_attr;
    let clamp = |v: i32| v.clamp(0, 16) as u8;
    Ok((
        o.phys_port_cnt,
        clamp(o.max_qp_rd_atom),
        clamp(o.max_qp_init_rd_atom),
        attr.max_dm_size,
    ))
}

/// Finds the device (by name, else the first), opens it, and checks it has an ACTIVE port.
pub fn probe(name: Option<&str>) -> Result<DeviceSummary, VerbsError> {
    if !sysfs_has_devices() {
        return Err(VerbsError::NoDevice);
    }
    let mut n = 0;
    // SAFETY: `n` is a valid out-parameter; the list is freed below on every path.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return match errno() {
            libc::ENOSYS | libc::ENODEV | libc::ENOENT => Err(VerbsError::NoDevice),
            e => Err(VerbsError::Sys {
                what: "ibv_get_device_list",
                errno: e,
            }),
        };
    }
    let result = probe_list(list, n.max(0) as usize, name);
    // SAFETY: `list` came from ibv_get_device_list and is freed once, after its last use.
    unsafe { sys::ibv_free_device_list(list) };
    result
}

fn probe_list(
    list: *mut *mut sys::ibv_device,
    n: usize,
    name: Option<&str>,
) -> Result<DeviceSummary, VerbsError> {
    if n == 0 {
        return Err(VerbsError::NoDevice);
    }
    // SAFETY: ibv_get_device_list returned `n` valid device pointers.
    let devices = unsafe { std::slice::from_raw_parts(list, n) };
    let dev_name = |d: *mut sys::ibv_device| {
        // SAFETY: `d` is a device of the live list; its name is NUL-terminated.
        unsafe {
            CStr::from_ptr(sys::ibv_get_device_name(d))
                .to_string_lossy()
                .into_owned()
        }
    };
    let dev = match name {
        None => devices[0],
        Some(want) => match devices.iter().copied().find(|&d| dev_name(d) == want) {
            Some(d) => d,
            None => {
                let found = devices
                    .iter()
                    .map(|&d| dev_name(d))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(VerbsError::NoSuchDevice {
                    name: want.into(),
                    found,
                });
            }
        },
    };
    let name = dev_name(dev);
    // SAFETY: `dev` is a device of the live list; the context is closed below.
    let ctx = unsafe { sys::ibv_open_device(dev) };
    if ctx.is_null() {
        let e = errno();
        // SAFETY: `dev_name` is a NUL-terminated array inside the device struct.
        let kdev = unsafe {
            CStr::from_ptr((*dev).dev_name.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        return Err(match e {
            libc::EACCES | libc::EPERM => VerbsError::Permission {
                device: name,
                path: format!("/dev/infiniband/{kdev}"),
                errno: e,
            },
            _ => sys_err("ibv_open_device"),
        });
    }
    let result = (|| {
        let (ports, rd, init_rd, max_dm) = limits(ctx)?;
        let mut first_state = None;
        for port in 1..=ports.max(1) {
            let state = port_state(ctx, port)?;
            if state == sys::IBV_PORT_ACTIVE {
                return Ok(DeviceSummary {
                    name: name.clone(),
                    port,
                    max_dm,
                    max_rd_atom: rd,
                    max_init_rd_atom: init_rd,
                });
            }
            first_state.get_or_insert(state);
        }
        Err(VerbsError::PortDown {
            device: name.clone(),
            port: 1,
            state: port_state_name(first_state.unwrap_or(sys::IBV_PORT_NOP)),
        })
    })();
    // SAFETY: closes the context opened above; nothing created on it outlives this call.
    unsafe { sys::ibv_close_device(ctx) };
    result
}
