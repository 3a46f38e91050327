//! Core lists as `numactl --physcpubind` and `taskset -c` take them: `2-9`, `0,2,4`, `0-3,8`.
use std::fmt;

/// Which cores the poller threads run on, one poller per listed core, in list order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreList(Vec<usize>);

/// Why a core list could not be parsed or used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoreListError {
    /// Nothing was given.
    Empty,
    /// An item that is not a core number or a range `a-b`.
    Bad {
        /// The item as written.
        item: String,
    },
    /// A range whose end is below its start (`9-2`).
    Backwards {
        /// First core of the range.
        from: usize,
        /// Last core of the range.
        to: usize,
    },
    /// A core listed twice: two busy-polling pollers on one core halve each other.
    Repeated {
        /// The core.
        core: usize,
    },
    /// A core this process may not run on (see `taskset -p $$`).
    NotAllowed {
        /// The core.
        core: usize,
        /// The cores this process may run on.
        allowed: Vec<usize>,
    },
}

impl fmt::Display for CoreListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreListError::Empty => write!(f, "empty core list (give cores as `2-9` or `0,2,4`)"),
            CoreListError::Bad { item } => write!(
                f,
                "`{item}` in the core list is not a core number or a range like `2-9`"
            ),
            CoreListError::Backwards { from, to } => {
                write!(f, "core range `{from}-{to}` ends before it starts")
            }
            CoreListError::Repeated { core } => write!(f, "core {core} is listed twice"),
            CoreListError::NotAllowed { core, allowed } => write!(
                f,
                "core {core} is not one this process may run on ({allowed:?}); \
                 pick from those, or opt out of pinning"
            ),
        }
    }
}

impl std::error::Error for CoreListError {}

/// Most cores one list may name (a typo like `0-99999999` is an error, not an allocation).
const MAX_CORES: usize = 4096;

impl CoreList {
    /// Parses `2-9`, `0,2,4`, `0-3,8` (spaces around items are ignored).
    pub fn parse(s: &str) -> Result<CoreList, CoreListError> {
        let mut cores = Vec::new();
        for item in s.split(',').map(str::trim) {
            if item.is_empty() {
                if s.trim().is_empty() {
                    return Err(CoreListError::Empty);
                }
                return Err(CoreListError::Bad { item: item.into() });
            }
            let num = |t: &str| -> Result<usize, CoreListError> {
                t.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&c| c < MAX_CORES)
                    .ok_or(CoreListError::Bad { item: item.into() })
            };
            let (from, to) = match item.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let c = num(item)?;
                    (c, c)
                }
            };
            if to < from {
                return Err(CoreListError::Backwards { from, to });
            }
            for c in from..=to {
                if cores.contains(&c) {
                    return Err(CoreListError::Repeated { core: c });
                }
                cores.push(c);
            }
        }
        Ok(CoreList(cores))
    }

    /// The first `n` cores this process may run on (all of them if fewer).
    pub fn first_allowed(n: usize) -> CoreList {
        CoreList(allowed_cores().into_iter().take(n.max(1)).collect())
    }

    /// The cores, in poller order.
    pub fn cores(&self) -> &[usize] {
        &self.0
    }

    /// An error naming the first listed core this process may not run on.
    pub fn check_allowed(&self) -> Result<(), CoreListError> {
        let allowed = allowed_cores();
        if allowed.is_empty() {
            return Ok(()); // the machine does not say: pinning will report it
        }
        match self.0.iter().find(|c| !allowed.contains(c)) {
            Some(&core) => Err(CoreListError::NotAllowed { core, allowed }),
            None => Ok(()),
        }
    }
}

impl std::str::FromStr for CoreList {
    type Err = CoreListError;
    fn from_str(s: &str) -> Result<CoreList, CoreListError> {
        CoreList::parse(s)
    }
}

impl fmt::Display for CoreList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// The cores this process may run on (empty: the machine does not say).
pub(crate) fn allowed_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_numactl_takes() {
        assert_eq!(CoreList::parse("2-5").unwrap().cores(), &[2, 3, 4, 5]);
        assert_eq!(CoreList::parse("0,2,4").unwrap().cores(), &[0, 2, 4]);
        assert_eq!(CoreList::parse(" 0-1, 8 ").unwrap().cores(), &[0, 1, 8]);
        assert_eq!(CoreList::parse("7").unwrap().to_string(), "7");
    }

    #[test]
    fn bad_lists_are_clear_errors() {
        assert_eq!(CoreList::parse(""), Err(CoreListError::Empty));
        assert!(matches!(
            CoreList::parse("a"),
            Err(CoreListError::Bad { .. })
        ));
        assert!(matches!(
            CoreList::parse("1,,2"),
            Err(CoreListError::Bad { .. })
        ));
        assert!(matches!(
            CoreList::parse("1-"),
            Err(CoreListError::Bad { .. })
        ));
        assert!(matches!(
            CoreList::parse("-3"),
            Err(CoreListError::Bad { .. })
        ));
        assert!(matches!(
            CoreList::parse("0-99999999"),
            Err(CoreListError::Bad { .. })
        ));
        assert_eq!(
            CoreList::parse("9-2"),
            Err(CoreListError::Backwards { from: 9, to: 2 })
        );
        assert_eq!(
            CoreList::parse("1,0-2"),
            Err(CoreListError::Repeated { core: 1 })
        );
        let e = CoreList::parse("4095").unwrap().check_allowed();
        if !allowed_cores().is_empty() && !allowed_cores().contains(&4095) {
            assert!(matches!(
                e,
                Err(CoreListError::NotAllowed { core: 4095, .. })
            ));
            assert!(e.unwrap_err().to_string().contains("4095"));
        }
    }
}
