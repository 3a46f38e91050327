//! `remora bench --sweep NAME=v1,v2,...`: the same run at several values of one parameter
//! (throughput-vs-clients curves and the like), one set of records per value.
use super::BenchArgs;
use crate::args::FabricKind;

/// The parameters a sweep can vary.
pub const SWEEP_NAMES: &str = "clients, clients-per-node, coroutines, threads, value-size, records";

/// A parsed `--sweep`: the parameter and its values, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    pub name: String,
    pub values: Vec<u64>,
}

/// Parses `NAME=v1,v2,...`.
pub fn parse(spec: &str) -> Result<Sweep, String> {
    let (name, vals) = spec
        .split_once('=')
        .ok_or_else(|| format!("--sweep {spec}: give NAME=v1,v2,... (NAME: {SWEEP_NAMES})"))?;
    let name = name.trim().to_string();
    if !SWEEP_NAMES.split(", ").any(|n| n == name) {
        return Err(format!(
            "--sweep: unknown parameter `{name}` (one of: {SWEEP_NAMES})"
        ));
    }
    let values = vals
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("--sweep {name}: `{v}` is not a positive integer"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if values.is_empty() {
        return Err(format!("--sweep {name}: no values"));
    }
    Ok(Sweep { name, values })
}

/// The flags of one sweep point: `a` with the swept parameter set to `v`.
/// `clients` is the number of client threads in all: on the sim, spread evenly over the
/// compute nodes (so it must be a multiple of `--compute-nodes`); elsewhere, `--threads`.
pub fn point(a: &BenchArgs, name: &str, v: u64) -> Result<BenchArgs, String> {
    let mut b = a.clone();
    let n = usize::try_from(v).map_err(|_| format!("--sweep {name}={v}: too large"))?;
    match name {
        "clients" if a.fabric == FabricKind::Sim => {
            let cn = a.sim.compute_nodes.max(1);
            if n % cn != 0 {
                return Err(format!(
                    "--sweep clients={v}: the sim's clients are spread over {cn} compute \
                     nodes; give a multiple of {cn}"
                ));
            }
            b.sim.clients_per_node = n / cn;
        }
        "clients" | "threads" => b.threads = n,
        "clients-per-node" => b.sim.clients_per_node = n,
        "coroutines" => b.coroutines = n,
        "value-size" => b.value_size = n,
        "records" => b.records = v,
        other => return Err(format!("--sweep: unknown parameter `{other}`")),
    }
    b.sweep = None;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let s = parse("clients=8,16, 32").unwrap();
        assert_eq!(s.name, "clients");
        assert_eq!(s.values, vec![8, 16, 32]);
        assert!(parse("clients").is_err());
        assert!(parse("cores=1,2").is_err());
        assert!(parse("clients=8,0").is_err());
        assert!(parse("clients=8,x").is_err());
    }
}
