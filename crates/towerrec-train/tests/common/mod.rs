//! What the integration tests of towerrec-train share: small model sections of a
//! config.

/// A small DLRM `[model]` section.
pub const DLRM: &str = r#"kind = "dlrm"
embedding_dim = 8
bottom_mlp = [16, 8]
top_mlp = [32, 1]"#;

/// A small DCN-v2 `[model]` section.
pub const DCN: &str = r#"kind = "dcn"
embedding_dim = 8
cross_layers = 2
cross_rank = 4
top_mlp = [32, 1]"#;
