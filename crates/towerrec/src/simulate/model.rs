//! The simulator's view of a towerrec config: its tables, layers and batch as a
//! [`Workload`], and its DMT towers (`[model.towers]`, DMT paper §3.2 and §4) as
//! [`Towers`], counted as `towerrec train` builds the model.

use super::*;
use towerrec_sim::SyntheticIds;
use towerrec_train::config::TowersConfig;

/// A model to simulate: the flat model, its towers when the config has them, and the
/// config's `[cluster]` shape.
pub(super) struct SimModel {
    /// The model without towers (a DMT-DLRM's bottom MLP ending in N, not D: the flat
    /// and SPTT baselines of `scripts/dmt-speed.sh`).
    pub workload: Workload,
    pub towers: Option<Towers>,
    /// `(hosts, ranks_per_host)` of the config's `[cluster]`, if it has one.
    pub cluster: Option<(usize, usize)>,
    /// The config's `cluster.tower_chunks` (1 for a preset: the paper's exchange).
    pub tower_chunks: usize,
    /// The config's `cluster.overlap_halves`: whether towerrec runs its training steps
    /// in halves where the plan allows (false for a preset: the papers' whole steps).
    pub overlap_halves: bool,
    /// Why the model cannot be trained (int8 tables), if it cannot.
    pub not_trainable: Option<String>,
}

/// A model preset, or the model of a towerrec config file.
pub(super) fn load_model(name: &str) -> Result<SimModel> {
    if Workload::PRESETS.contains(&name) {
        return Ok(SimModel {
            workload: Workload::preset(name)?,
            towers: None,
            cluster: None,
            tower_chunks: 1,
            overlap_halves: false,
            not_trainable: None,
        });
    }
    let path = Path::new(name);
    if !path.exists() {
        bail!(
            "--config {name}: neither a model preset ({}) nor a file",
            Workload::PRESETS.join(", ")
        );
    }
    let cfg = Config::load(path, &[])?;
    let workload = workload_of(&cfg, name)?;
    let towers = match &cfg.model.towers {
        Some(t) => Some(towers_of(t, &cfg, name)?),
        None => None,
    };
    let c = &cfg.cluster;
    let cluster = (c.hosts * c.ranks_per_host > 1).then_some((c.hosts, c.ranks_per_host));
    Ok(SimModel {
        workload,
        towers,
        cluster,
        tower_chunks: c.tower_chunks,
        overlap_halves: c.overlap_halves,
        not_trainable: cfg.refuse_int8("training").err().map(|e| e.to_string()),
    })
}

/// The towers of `[model.towers]`: the same tables in each as `towerrec train` puts
/// there (the config's `[cluster] plan`'s, else the default planner's: docs/DMT.md,
/// "Where the towers come from"), the same module; hosts per tower as `towerrec train`
/// places them without a plan.
fn towers_of(t: &TowersConfig, cfg: &Config, name: &str) -> Result<Towers> {
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)
        .with_context(|| format!("{name}: reading the data's schema for the towers"))?;
    let names: Vec<String> = schema.sparse.iter().map(|f| f.name.clone()).collect();
    let plan = cfg
        .plan_path()
        .map(towerrec_plan::Plan::load)
        .transpose()
        .with_context(|| format!("{name}: reading its [cluster] plan for the towers"))?;
    let tables = towerrec_train::run_towers::run_towers(&cfg.model, &names, plan.as_ref(), None)
        .with_context(|| format!("{name}: its towers"))?
        .expect("a model with [model.towers] has towers");
    Ok(Towers {
        kind: t.kind(),
        tables,
        hosts_per_tower: None,
        maps_at_lookup: true,
        chunks: cfg.cluster.tower_chunks,
    })
}

/// The simulator's view of a towerrec run: its tables and lookups per sample, its
/// layers, its batch; f32 everywhere but on the wire of `[cluster.qcomms]` and in the
/// tables of `model.table_precision` (bytes per row read), 64-bit ids.
/// A DMT model's bottom MLP is given back ending in the embedding width (the model
/// without towers); [`Towers`] rebuilds the DMT over-arch.
pub(super) fn workload_of(cfg: &Config, name: &str) -> Result<Workload> {
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).with_context(|| {
        format!("{name}: the table sizes come from the config's data, which could not be read")
    })?;
    let lookups: Vec<f64> = match &cfg.data {
        towerrec_data::DataConfig::Synthetic(s) => s
            .tables
            .iter()
            .flat_map(|t| std::iter::repeat_n(t.pooling.mean(), t.count))
            .collect(),
        _ => vec![1.0; schema.num_sparse()],
    };
    let tables = schema
        .sparse
        .iter()
        .zip(lookups.iter().chain(std::iter::repeat(&1.0)))
        .map(|(f, &l)| TableGroup {
            count: 1,
            lookups: l,
            rows: f.rows,
        })
        .collect();
    let m = &cfg.model;
    let (interaction, bottom_mlp) = match m.kind {
        ModelKind::Dlrm => {
            let mut bottom = m.bottom_mlp.clone();
            if let Some(last) = bottom.last_mut() {
                *last = m.embedding_dim;
            }
            let dot = Interaction::Dot {
                self_interaction: m.self_interaction,
            };
            (dot, bottom)
        }
        // towerrec's DCN crosses the raw dense features: it has no bottom MLP.
        ModelKind::Dcn => (
            Interaction::Cross {
                layers: m.cross_layers,
                rank: m.cross_rank,
            },
            Vec::new(),
        ),
    };
    Ok(Workload {
        name: name.to_string(),
        dense_features: schema.num_dense(),
        embedding_dim: m.embedding_dim,
        tables,
        bottom_mlp,
        top_mlp: m.top_mlp.clone(),
        interaction,
        batch: cfg.train.batch_size,
        batch_per_chip: false,
        param_bytes: 4,
        grad_bytes: cfg.cluster.qcomms.dense.bytes(),
        // towerrec's id exchange as built (sharded/route.rs, `Router::pack`): a u64
        // per id and a u64 length per bag.
        index_bytes: std::mem::size_of::<u64>(),
        bag_bytes: std::mem::size_of::<u64>(),
        wire_bytes: wire_bytes(cfg.cluster.qcomms),
        table_row_bytes: table_row_bytes(&cfg.model, &schema, &lookups),
        // "auto" was resolved when the config was read, for this machine.
        dense_bf16: cfg.model.dense_precision == towerrec_core::matmul::DensePrecision::Bf16,
        synthetic: synthetic_ids(&cfg.data),
    })
}

/// Bytes of one pooled value on the wire under `[cluster.qcomms]` (`None`: f32). The
/// simulator prices one width for both directions; where the forward's and the
/// backward's differ it takes their mean, which keeps each step's total bytes (the two
/// directions carry the same number of values).
fn wire_bytes(q: towerrec_train::config::QComms) -> Option<usize> {
    let fp32 = towerrec_comm::WirePrecision::Fp32;
    let quantized = q.forward != fp32 || q.backward != fp32;
    quantized.then(|| (q.forward.bytes() + q.backward.bytes()) / 2)
}

/// Bytes of a stored row as a lookup reads it, where a table is not fp32
/// (`model.table_precision`): the mean over a sample's lookups, rounded to a byte.
fn table_row_bytes(
    m: &towerrec_train::config::ModelConfig,
    schema: &towerrec_data::Schema,
    lookups: &[f64],
) -> Option<usize> {
    let fp32 = towerrec_core::embedding::TablePrecision::Fp32;
    let precisions: Vec<_> = (schema.sparse.iter())
        .map(|f| m.precision_of(&f.name))
        .collect();
    if precisions.iter().all(|&p| p == fp32) {
        return None;
    }
    let weight = |t: usize| lookups.get(t).copied().unwrap_or(1.0);
    let total: f64 = (0..precisions.len()).map(weight).sum();
    let bytes: f64 = (precisions.iter().enumerate())
        .map(|(t, p)| weight(t) * p.row_bytes(m.embedding_dim) as f64)
        .sum();
    (total > 0.0).then(|| (bytes / total).round().max(1.0) as usize)
}

/// The ids one sample of `data` draws, by kind, where towerrec generates it.
fn synthetic_ids(data: &towerrec_data::DataConfig) -> Option<SyntheticIds> {
    let towerrec_data::DataConfig::Synthetic(s) = data else {
        return None;
    };
    let mut ids = SyntheticIds {
        zipf: 0.0,
        uniform: 0.0,
    };
    for t in &s.tables {
        let n = t.count as f64 * t.pooling.mean();
        if t.zipf_exponent > 0.0 {
            ids.zipf += n;
        } else {
            ids.uniform += n;
        }
    }
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use towerrec_train::model::Model;

    /// The quickstart with `overrides`: its simulator view, and the model towerrec
    /// trains.
    fn both(overrides: &[&str]) -> (Workload, Option<Towers>, Model) {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let cfg = Config::quickstart(&o).unwrap();
        let w = workload_of(&cfg, "quickstart").unwrap();
        let towers = cfg
            .model
            .towers
            .as_ref()
            .map(|t| towers_of(t, &cfg, "quickstart").unwrap());
        let s = towerrec_data::schema(&cfg.data, &cfg.base_dir).unwrap();
        let model = Model::build(
            &cfg.model,
            &cfg.optimizer,
            &s,
            cfg.train.seed,
            towerrec_train::run_towers::fresh_towers(&cfg.model, &s, None)
                .unwrap()
                .as_deref(),
        )
        .unwrap();
        (w, towers, model)
    }

    #[test]
    fn the_simulator_counts_the_flops_towerrec_builds() {
        // Flat DLRM and DCN, then DMT with each module kind, towers by count and by
        // name: the simulator's forward FLOPs per sample (dense layers and modules) are
        // the built model's, exactly.
        // Towers by name: C1–C3 and the other 23 tables.
        let rest: Vec<String> = (4..=26).map(|i| format!("\"C{i}\"")).collect();
        let by_name = format!(
            "model.towers={{module=\"dcn\",features=[[\"C1\",\"C2\",\"C3\"],[{}]],d=2,cross_layers=1,cross_rank=2}}",
            rest.join(",")
        );
        let cases: &[&[&str]] = &[
            &[],
            &["model.kind=\"dcn\"", "model.cross_layers=2"],
            &[
                "model.towers={module=\"dlrm\",count=2,d=8,c=1,p=0}",
                "model.bottom_mlp=[32,8]",
            ],
            &[
                "model.towers={module=\"dlrm\",count=5,d=4,c=2,p=1}",
                "model.bottom_mlp=[32,4]",
            ],
            &["model.towers={module=\"identity\",count=3}"],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=1",
                "model.towers={module=\"dcn\",count=4,d=4,cross_layers=2}",
            ],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=1",
                "model.cross_rank=8",
                &by_name,
            ],
            // Without dense features (docs/CONFIG.md, "Any feature mix").
            &["data.num_dense=0", "model.bottom_mlp=[]"],
            &[
                "data.num_dense=0",
                "model.bottom_mlp=[]",
                "model.towers={module=\"dlrm\",count=5,d=4,c=2,p=1}",
            ],
            &[
                "data.num_dense=0",
                "model.bottom_mlp=[]",
                "model.kind=\"dcn\"",
                "model.cross_layers=1",
                "model.towers={module=\"dcn\",count=4,d=4,cross_layers=2}",
            ],
        ];
        for overrides in cases {
            let (w, towers, mut model) = both(overrides);
            let built = model.forward_flops_per_sample() as f64;
            let simulated = match &towers {
                None => w.dense_counts().forward_flops(),
                Some(t) => {
                    let c = t.costs(&w, 1).unwrap();
                    c.dense.forward_flops() + c.module_flops
                }
            };
            assert_eq!(simulated, built, "{overrides:?}");
            let params: usize = model.dense_params().iter().map(|p| p.value.len()).sum();
            let simulated = match &towers {
                None => w.dense_counts().params,
                Some(t) => {
                    let c = t.costs(&w, 1).unwrap();
                    c.dense.params + c.module_params
                }
            };
            assert_eq!(simulated, params as f64, "{overrides:?}");
        }
    }

    #[test]
    fn generated_data_tells_the_simulator_which_ids_it_draws() {
        let tables = "data.tables=[{rows=100,zipf_exponent=1.05,pooling=2,count=3},\
                      {rows=50,pooling={mean=4.0}},{rows=10,count=2}]";
        let (w, _, _) = both(&[tables]);
        assert_eq!(
            w.synthetic,
            Some(SyntheticIds {
                zipf: 6.0,
                uniform: 6.0
            })
        );
    }

    #[test]
    fn quantized_communication_prices_the_bytes_sent() {
        let (fp32, _, _) = both(&[]);
        assert_eq!(fp32.wire_bytes, None);
        let strong = "cluster.qcomms={forward=\"fp16\",backward=\"bf16\"}";
        let (q, _, _) = both(&[strong]);
        assert_eq!(q.wire_bytes, Some(2));
        assert_eq!(
            2.0 * q.pooled_bytes_per_sample(),
            fp32.pooled_bytes_per_sample()
        );
        // fp32 forward, bf16 backward: the mean width keeps the step's bytes.
        let (half, _, _) = both(&["cluster.qcomms={backward=\"bf16\"}"]);
        assert_eq!(half.wire_bytes, Some(3));
        assert_eq!((fp32.grad_bytes, half.grad_bytes), (4, 4));
        let (dense, _, _) = both(&["cluster.qcomms={dense=\"bf16\"}"]);
        assert_eq!((dense.grad_bytes, dense.wire_bytes), (2, None));
    }
}
