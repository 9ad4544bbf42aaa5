// qkv: the command line. Parsing only; the commands live in commands.cpp.
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "qkv/kernels/parallel.hpp"

int main(int argc, char** argv) {
  qkv::prefer_passive_omp_wait(argv);
  CLI::App app{"qkv: train attention models and look inside them"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  int status = 0;

  qkv::cli::TrainArgs t;
  auto* train = app.add_subcommand("train", "Train a model from a YAML config");
  train->add_option("config", t.config, "YAML config file (see configs/)")->required();
  train->add_option("--set", t.overrides, "Override a config key: --set section.key=value (repeatable)");
  train->add_option("--resume", t.resume, "Resume exactly from a checkpoint (.h5)");
  train->add_option("--out", t.out, "Run directory (default: run.out of the config)");
  train->add_option("--threads", t.threads, "Threads (default: train.threads, 0 = all cores)")->check(CLI::NonNegativeNumber);
  train->add_option("--stop-after", t.stop_after, "Stop after this many steps, saving last.h5 (for tests)")->check(CLI::NonNegativeNumber);
  train->add_flag("--quiet", t.quiet, "No progress output");
  train->callback([&] { status = qkv::cli::train(t); });

  std::string ckpt;
  std::vector<std::string> eval_overrides;
  int eval_threads = 0;
  auto* eval = app.add_subcommand("eval", "Held-out metrics of a checkpoint");
  eval->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  eval->add_option("--set", eval_overrides, "Override a task key: --set task.key=value");
  eval->add_option("--threads", eval_threads, "Threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  eval->callback([&] { status = qkv::cli::eval(ckpt, eval_overrides, eval_threads); });

  auto* inspect = app.add_subcommand("inspect", "Show a checkpoint: HDF5 tree, shapes, statistics, config");
  inspect->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  inspect->callback([&] { status = qkv::cli::inspect(ckpt); });

  std::size_t example = 0;
  std::string attn_out;
  auto* attention = app.add_subcommand("attention", "Attention weights of every layer and head for one held-out example");
  attention->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  attention->add_option("--example", example, "Index into the held-out set");
  attention->add_option("--out", attn_out, "Also write the weights as CSV (layer,head,query,key,weight,...)");
  attention->callback([&] { status = qkv::cli::attention(ckpt, example, attn_out); });

  std::size_t logits_count = 4;
  std::string logits_out;
  auto* logits = app.add_subcommand("logits", "Logits of the first held-out examples, as text (for parity checks)");
  logits->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  logits->add_option("--count", logits_count, "Number of held-out examples")->check(CLI::PositiveNumber);
  logits->add_option("--out", logits_out, "Output file")->required();
  logits->callback([&] { status = qkv::cli::logits(ckpt, logits_count, logits_out); });

  auto* gradcheck = app.add_subcommand("gradcheck", "Gradient-check every layer in float64 and print a table");
  gradcheck->callback([&] { status = qkv::cli::gradcheck(); });

  qkv::cli::SweepArgs s;
  auto* sweep = app.add_subcommand("sweep", "Train a grid of overrides x seeds; gather results.csv");
  sweep->add_option("sweep", s.file, "Sweep file (YAML: base, set, grid, seeds, out)")->required();
  sweep->add_option("--set", s.overrides, "Override a key of the base config for every run");
  sweep->add_option("--out", s.out, "Sweep directory (default: out of the sweep file)");
  sweep->add_option("--jobs", s.jobs, "Runs at once in this process (per MPI rank)")->check(CLI::PositiveNumber);
  sweep->add_option("--threads", s.threads, "Threads per run (default: cores / jobs)")->check(CLI::NonNegativeNumber);
  sweep->add_flag("--dry-run", s.dry_run, "List the runs and exit");
  sweep->callback([&] { status = qkv::cli::sweep(s); });

  auto* info = app.add_subcommand("info", "Version, BLAS kernel, threads and MPI");
  info->callback([&] { status = qkv::cli::info(); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return status;
}
