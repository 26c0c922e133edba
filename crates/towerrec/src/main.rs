//! The `towerrec` command-line tool.

mod bench;
mod bench_kernels;
mod calibrate;
mod commands;
mod data_cmds;
mod partition_cmd;
mod partition_plot;
mod plan_cmd;
mod plan_oper;
mod plan_summary;
mod profile_cmd;
mod progress;
mod quantize_cmd;
mod report;
mod serve_cmd;
mod simulate;
mod train_cmd;
mod vocab_cmd;

use clap::{Parser, Subcommand};

/// Batch-sized buffers on 2 MiB pages (see the module for why).
#[global_allocator]
static ALLOC: towerrec_core::huge_alloc::LargeOnHugePages =
    towerrec_core::huge_alloc::LargeOnHugePages;

/// towerrec: train, evaluate and prepare data for recommendation models (DLRM, DCN-v2).
#[derive(Parser)]
#[command(name = "towerrec", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model (with no --config: the embedded synthetic quickstart).
    Train(train_cmd::TrainArgs),
    /// Score a data file with a saved model and print AUC, log loss and NE.
    Eval(commands::EvalArgs),
    /// Serve a trained model over HTTP: POST /score, GET /health, GET /metrics (docs/SERVING.md).
    Serve(serve_cmd::ServeArgs),
    /// One HTML page of training runs: loss, AUC, samples/s, time and bytes per phase, per-rank times (docs/REPORT.md).
    Report(report::ReportArgs),
    /// Write an inference checkpoint with int8 row-wise quantized tables from a trained one.
    Quantize(quantize_cmd::QuantizeArgs),
    /// Generate a synthetic data set into the preprocessed binary format.
    Datagen(data_cmds::DatagenArgs),
    /// Convert a config's text data (Criteo TSV, schema CSV) into the preprocessed binary format.
    Preprocess(data_cmds::PreprocessArgs),
    /// Count a config's training data into a vocabulary file (frequency-ordered ids, an OOV row) for `[data] vocab`.
    Vocab(vocab_cmd::VocabArgs),
    /// Measure speed: whole model steps, or kernels against the machine's limits.
    Bench(bench::BenchArgs),
    /// Count how often every embedding row is read (an access profile for OPER plans).
    Profile(profile_cmd::ProfileArgs),
    /// Plan how to shard the embedding tables over hosts × ranks; writes the plan as JSON.
    Plan(plan_cmd::PlanArgs),
    /// Group a trained run's sparse features into balanced towers (DMT's Tower Partitioner); writes JSON and SVGs.
    Partition(partition_cmd::PartitionArgs),
    /// Predict inference or training steps on described hardware, at scale (the performance model).
    Simulate(simulate::SimulateArgs),
    /// Measure this machine (GEMM, memory, collectives) and write a hardware file for the simulator.
    Calibrate(calibrate::CalibrateArgs),
}

/// Restores the default SIGPIPE action, so that `towerrec … | head` ends quietly as other
/// Unix tools do instead of panicking on a closed stdout (Rust ignores SIGPIPE).
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called once at start-up, before any thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    default_sigpipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Train(a)) => train_cmd::train(a),
        Some(Command::Eval(a)) => commands::eval(a),
        Some(Command::Serve(a)) => serve_cmd::run(a),
        Some(Command::Report(a)) => report::run(a),
        Some(Command::Quantize(a)) => quantize_cmd::run(a),
        Some(Command::Simulate(a)) => simulate::run(a),
        Some(Command::Datagen(a)) => data_cmds::datagen(a),
        Some(Command::Preprocess(a)) => data_cmds::preprocess(a),
        Some(Command::Vocab(a)) => vocab_cmd::run(a),
        Some(Command::Bench(a)) => bench::run(a),
        Some(Command::Plan(a)) => plan_cmd::run(a),
        Some(Command::Profile(a)) => profile_cmd::run(a),
        Some(Command::Partition(a)) => partition_cmd::run(a),
        Some(Command::Calibrate(a)) => calibrate::run(a),
        None => {
            use clap::CommandFactory;
            let _ = Cli::command().print_help();
            Ok(())
        }
    };
    if let Err(e) = result {
        // In one piece: under mpirun every rank's stderr is gathered.
        towerrec_comm::print_line(&format!("error: {e:#}"));
        std::process::exit(1);
    }
}
