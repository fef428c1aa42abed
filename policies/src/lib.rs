//! Residency mechanisms and retention policies.
//!
//! A *mechanism* (module [`mechanisms`]) decides how expert instances map to commit units
//! (one expert per VMM commit, N experts packed per chunk, a large region subdivided, or OS
//! pages) and gives each unit its useful and committed bytes, as a [`UnitMap`].
//! A *retention policy* decides which units stay resident across tokens under a budget.
//! This crate does not model time: the `sim` crate's engine prices what these decide.

pub mod mechanisms;
pub mod regime;
pub mod retention;
pub mod units;

pub use mechanisms::{Mechanism, MechanismSpec, Paging, Sizes};
pub use regime::{Budget, Schedule, Semantics, Split};
pub use retention::{EvictionPolicy, PolicyKind};
pub use units::{UnitInfo, UnitMap};
