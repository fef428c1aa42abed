//! Hardware profiles: every cost constant as value + unit + provenance.
//!
//! Owned here: the profile schema, loading and validating profile JSON, and the shipped
//! profiles. Not here: how constants are used (the `sim` cost model) or measured (`validate`).
