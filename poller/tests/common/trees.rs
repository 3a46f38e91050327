//! Sherman, FG+ or CHIME (built on Sherman) behind one handle, so that the Sherman crash
//! tests (`sherman_crash`, `sherman_torn`) run CHIME through the same campaigns.
//!
//! Included by the tests that use it (`#[path = "common/trees.rs"] mod trees;`).
use remora_core::chime::{Chime, ChimeConfig};
use remora_core::fabric::Endpoint;
use remora_core::index::KvIndex;
use remora_core::sherman::{Sherman, ShermanConfig, ShermanError};

/// Which tree, and its configuration.
#[derive(Debug, Clone, Copy)]
pub enum Base {
    Sherman(ShermanConfig),
    Chime(ChimeConfig),
}

impl Base {
    /// The Sherman configuration under it.
    pub fn sherman(&self) -> ShermanConfig {
        match self {
            Base::Sherman(c) => *c,
            Base::Chime(c) => c.sherman,
        }
    }

    /// This tree on `cfg` (CHIME keeps its switches and cache split).
    pub fn with(self, cfg: ShermanConfig) -> Base {
        match self {
            Base::Sherman(_) => Base::Sherman(cfg),
            Base::Chime(c) => Base::Chime(ChimeConfig { sherman: cfg, ..c }),
        }
    }

    /// Creates the tree (CHIME: or opens it).
    pub async fn create<E: Endpoint>(self, ep: &E) -> Result<Tree<'_, E>, ShermanError> {
        Ok(match self {
            Base::Sherman(c) => Tree::Sherman(Sherman::create(ep, c).await?),
            Base::Chime(c) => Tree::Chime(Chime::create(ep, c).await?),
        })
    }

    /// Opens the tree another client created.
    pub async fn open<E: Endpoint>(self, ep: &E) -> Result<Tree<'_, E>, ShermanError> {
        Ok(match self {
            Base::Sherman(c) => Tree::Sherman(Sherman::open(ep, c).await?),
            Base::Chime(c) => Tree::Chime(Chime::create(ep, c).await?),
        })
    }
}

/// A handle on either tree (a CHIME handle is a Sherman's and CHIME's own state: one per
/// test client, never moved around, so its size does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Tree<'e, E: Endpoint> {
    Sherman(Sherman<'e, E>),
    Chime(Chime<'e, E>),
}

impl<'e, E: Endpoint> Tree<'e, E> {
    /// The Sherman under it (its splits, takeovers and repairs count CHIME's too).
    pub fn sherman(&self) -> &Sherman<'e, E> {
        match self {
            Tree::Sherman(t) => t,
            Tree::Chime(t) => t.sherman(),
        }
    }
}

impl<E: Endpoint> KvIndex for Tree<'_, E> {
    type Error = ShermanError;

    async fn upsert(&self, key: &[u8], value: &[u8]) -> Result<(), ShermanError> {
        match self {
            Tree::Sherman(t) => t.upsert(key, value).await,
            Tree::Chime(t) => t.upsert(key, value).await,
        }
    }

    async fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, ShermanError> {
        match self {
            Tree::Sherman(t) => t.update(key, value).await,
            Tree::Chime(t) => t.update(key, value).await,
        }
    }

    async fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, ShermanError> {
        match self {
            Tree::Sherman(t) => t.get(key, out).await,
            Tree::Chime(t) => t.get(key, out).await,
        }
    }

    async fn delete(&self, key: &[u8]) -> Result<bool, ShermanError> {
        match self {
            Tree::Sherman(t) => t.delete(key).await,
            Tree::Chime(t) => t.delete(key).await,
        }
    }

    async fn scan(
        &self,
        from: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, ShermanError> {
        match self {
            Tree::Sherman(t) => t.scan(from, limit, visit).await,
            Tree::Chime(t) => t.scan(from, limit, visit).await,
        }
    }
}
