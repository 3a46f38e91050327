//! Setting the model: `--set name=value` pairs and model files, checked against each
//! parameter's range, and the model's one-line summary and full description.
use super::Model;
use core::fmt;

/// A bad `--set` or model-file entry.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelError {
    /// No parameter has this name (the message lists the known ones).
    Unknown {
        /// The name given.
        name: String,
    },
    /// The value is not a finite number within the parameter's range (or breaks its own
    /// rule, e.g. `segment_bytes` must be a power of two).
    BadValue {
        /// The parameter.
        name: String,
        /// The value given, as text.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A line that is not `name = value`.
    BadLine {
        /// 1-based line number in the model file; 0 for a single `--set` pair.
        line: usize,
        /// The line as given.
        text: String,
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Unknown { name } => {
                let names: Vec<&str> = Model::PARAMS.iter().map(|p| p.name).collect();
                write!(
                    f,
                    "unknown model parameter '{name}'; known: {}",
                    names.join(", ")
                )
            }
            ModelError::BadValue { name, value, why } => {
                write!(f, "bad value '{value}' for model parameter '{name}': {why}")
            }
            ModelError::BadLine { line, text } => {
                write!(
                    f,
                    "model file line {line}: expected 'name = value', got '{text}'"
                )
            }
        }
    }
}

impl std::error::Error for ModelError {}

impl Model {
    /// Sets `name` to `value` (checked against the parameter's range).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ModelError> {
        let info = Model::PARAMS
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ModelError::Unknown { name: name.into() })?;
        let bad = |why: String| ModelError::BadValue {
            name: name.into(),
            value: value.into(),
            why,
        };
        let v: f64 = value
            .trim()
            .parse()
            .map_err(|_| bad("not a number".into()))?;
        if !v.is_finite() || v < info.min || v > info.max {
            return Err(bad(format!(
                "must be between {} and {} {}",
                info.min, info.max, info.unit
            )));
        }
        if name == "segment_bytes" && !(v as u64).is_power_of_two() {
            return Err(bad("must be a power of two".into()));
        }
        if let Some(slot) = self.slot(name) {
            *slot = v;
        }
        Ok(())
    }

    /// Applies one `name=value` override.
    pub fn set_pair(&mut self, pair: &str) -> Result<(), ModelError> {
        match pair.split_once('=') {
            Some((n, v)) => self.set(n.trim(), v.trim()),
            None => Err(ModelError::BadLine {
                line: 0,
                text: pair.into(),
            }),
        }
    }

    /// Applies a model file's text: `name = value` lines, blank lines and `#` comments.
    pub fn apply_file_text(&mut self, text: &str) -> Result<(), ModelError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            match line.split_once('=') {
                Some((n, v)) => self.set(n.trim(), v.trim())?,
                None => {
                    return Err(ModelError::BadLine {
                        line: i + 1,
                        text: raw.into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// One line naming the parameters that differ from the defaults (or "default model").
    pub fn summary(&self) -> String {
        let d = Model::default();
        let changed: Vec<String> = Model::PARAMS
            .iter()
            .filter(|p| self.get(p.name) != d.get(p.name))
            .map(|p| format!("{}={}", p.name, self.get(p.name).unwrap_or(f64::NAN)))
            .collect();
        let base = format!(
            "one_way={}ns link={}Gb/s nic={}Mops pcie_read={}ns host_atomic={}ns \
             server={}x{}ns/msg+lines(hit {}ns, miss {}/{}ns dram/nvm, llc {} lines)",
            self.one_way_ns,
            self.link_gbps,
            self.nic_mops,
            self.pcie_read_ns,
            self.host_atomic_ns,
            self.server_threads,
            self.service_ps(1) as f64 / 1000.0,
            self.server_llc_hit_ns,
            self.server_dram_ns,
            self.server_nvm_read_ns,
            self.server_llc_lines
        );
        if changed.is_empty() {
            format!("default model ({base})")
        } else {
            format!("model ({base}; changed: {})", changed.join(" "))
        }
    }

    /// A model file listing every parameter with its default and source.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for p in Model::PARAMS {
            s.push_str(&format!("# {} [{}]: {}\n", p.name, p.unit, p.source));
            s.push_str(&format!(
                "{} = {}\n",
                p.name,
                self.get(p.name).unwrap_or(p.default)
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_parses_checks_and_reports() {
        let mut m = Model::default();
        m.set("one_way_ns", "1000").unwrap();
        assert_eq!(m.one_way_ns, 1000.0);
        assert!(matches!(
            m.set("nope", "1"),
            Err(ModelError::Unknown { .. })
        ));
        assert!(matches!(
            m.set("link_gbps", "fast"),
            Err(ModelError::BadValue { .. })
        ));
        assert!(matches!(
            m.set("link_gbps", "-1"),
            Err(ModelError::BadValue { .. })
        ));
        assert!(matches!(
            m.set("segment_bytes", "24"),
            Err(ModelError::BadValue { .. })
        ));
        m.apply_file_text("# comment\n\nnic_mops = 50 # trailing\n")
            .unwrap();
        assert_eq!(m.nic_mops, 50.0);
        assert!(matches!(
            m.apply_file_text("x\n"),
            Err(ModelError::BadLine { line: 1, .. })
        ));
        assert!(m.summary().contains("nic_mops=50"));
        let mut d = Model::default();
        d.apply_file_text(&Model::default().describe()).unwrap();
        assert_eq!(d, Model::default());
    }
}
