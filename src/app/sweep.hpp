#pragma once
/// @file
/// Sweeps: a grid of config overrides times seeds, each a normal training run in its own
/// directory, results gathered into one CSV.
///
/// Sweep file (YAML):
///
///     base: ../sort.yaml        # the config every run starts from (relative to this file)
///     set:                      # overrides for every run
///       train.steps: 600
///     grid:                     # every combination of these values
///       model.heads: [1, 2, 4]
///     seeds: [1, 2, 3]
///     out: sweeps/heads         # sweep directory
///
/// Runs are claimed one at a time (an exclusive claim file per run and sweep session), so that
/// several local job slots, and every MPI rank of `mpirun -np N qkv sweep`, take the next
/// unfinished run as soon as they are free. A run is finished when its result.csv exists:
/// rerunning a sweep skips finished runs and resumes interrupted ones from their last.h5.

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/dist/comm.hpp"

namespace qkv::app {

struct SweepRun {
  std::string name;                    ///< directory name, e.g. "heads=4_seed=1"
  std::vector<std::string> settings;   ///< "key=value" of the grid, then "seed=N"
  std::vector<std::string> overrides;  ///< everything passed to `qkv train --set`
};

struct SweepPlan {
  std::string file, base, out;
  std::vector<std::string> grid_keys;
  std::vector<SweepRun> runs;
};

/// Read a sweep file and validate every run's config (errors: config::ConfigError with file,
/// line and key). `extra` overrides apply to every run; non-empty `seeds` replace the file's
/// seeds (`qkv sweep --seeds 1,2`: a quick variant of a sweep); each `grid` entry "KEY=V1,V2"
/// replaces the values of one key of the file's grid (`--grid optimizer.lr=0.001`: one lr of the
/// file's; an error if the grid has no such key). Run names do not change with either.
SweepPlan load_sweep(const std::string& path, const std::vector<std::string>& extra = {},
                     const std::vector<std::uint64_t>& seeds = {}, const std::vector<std::string>& grid = {});

struct SweepOptions {
  std::string executable;  ///< the qkv binary that trains each run
  std::string out;         ///< overrides the plan's out when non-empty
  int jobs = 1;            ///< runs at once in this process
  int threads = 0;         ///< threads per run; 0 = cores / jobs (at least 1)
  bool verbose = true;
};

/// Run every unfinished run of the plan; <out>/results.csv is rewritten after every finished run
/// (so a report can be drawn while a sweep runs) and by rank 0 at the end. Returns the number of
/// runs that failed (crashed or could not start).
int run_sweep(const SweepPlan& plan, const SweepOptions& options, dist::Comm& comm);

/// Gather <out>/runs/*/result.csv into <out>/results.csv (one row per run, plan order).
void write_sweep_results(const SweepPlan& plan, const std::string& out);

}  // namespace qkv::app
