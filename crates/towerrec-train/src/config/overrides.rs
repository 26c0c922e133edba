//! `--set KEY=VALUE`: overrides applied to a config's TOML text before it is parsed.

use crate::error::{Error, Result};

/// Applies `KEY=VALUE` overrides to TOML text: `KEY` is a dotted path
/// (`train.batch_size`, `data.split`), `VALUE` any TOML value (`512`, `"skip"`,
/// `{ kind = "tail", eval_rows = 2000 }`); a value that is not valid TOML is taken as a
/// string. The result is TOML text again, so that errors still point at the key.
pub fn with_overrides(text: &str, origin: &str, overrides: &[String]) -> Result<String> {
    if overrides.is_empty() {
        return Ok(text.to_string());
    }
    let fail = |message: String| Error::Config {
        file: origin.to_string(),
        message,
    };
    let mut root: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| fail(e.to_string()))?;
    for item in overrides {
        let (key, raw) = item
            .split_once('=')
            .ok_or_else(|| fail(format!("override '{item}': expected KEY=VALUE")))?;
        let (key, raw) = (key.trim(), raw.trim());
        let value = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        let parts: Vec<&str> = key.split('.').collect();
        let (last, path) = parts
            .split_last()
            .filter(|(last, _)| !last.is_empty())
            .ok_or_else(|| fail(format!("override '{item}': empty key")))?;
        let mut table = &mut root;
        for part in path {
            let entry = table
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry
                .as_table_mut()
                .ok_or_else(|| fail(format!("override '{item}': '{part}' is not a table")))?;
        }
        table.insert(last.to_string(), value);
    }
    toml::to_string(&root).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use towerrec_core::embedding::SparseOptimizer;
    use towerrec_data::BadRows;

    #[test]
    fn overrides_set_nested_keys_and_keep_errors_pointing_at_keys() {
        let sets = vec![
            "train.batch_size=512".to_string(),
            "optimizer.sparse={ kind = \"sgd\" }".to_string(),
            "train.bad_rows=skip".to_string(),
        ];
        let cfg = Config::quickstart(&sets).unwrap();
        assert_eq!(cfg.train.batch_size, 512);
        assert_eq!(cfg.train.bad_rows, BadRows::Skip);
        assert_eq!(cfg.optimizer.sparse, SparseOptimizer::Sgd);
        let err = Config::quickstart(&["model.embedding_dim=\"x\"".to_string()])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("embedding_dim"), "{err}");
        assert!(Config::quickstart(&["novalue".to_string()]).is_err());
        assert!(Config::quickstart(&["model.kind.x=1".to_string()]).is_err());
    }
}
