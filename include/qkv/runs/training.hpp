#pragma once
/// @file
/// A run as the qkv command makes it, for every program (the command, the Python module, tests):
/// train::run_training plus training snapshots (interp/snapshots.hpp) when train.snapshot_every >
/// 0. The runs/ layer is where training and the instruments meet, above both: training a run,
/// and following one as it trains (follow.hpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "qkv/interp/snapshots.hpp"
#include "qkv/train/run_directory.hpp"

namespace qkv::runs {

/// The callbacks that record snapshots into <dir>/snapshots.h5: at step 0 (or continuing the
/// file of a resumed run), every train.snapshot_every steps, at the final step, and the file
/// written beside every last.h5 checkpoint. `note` receives messages for the user (a snapshots
/// file that could not be continued).
class SnapshotsDuringTraining {
 public:
  SnapshotsDuringTraining(std::string dir, std::function<void(const std::string&)> note);
  train::Callbacks callbacks();

 private:
  std::string file_;
  std::function<void(const std::string&)> note_;
  std::unique_ptr<interp::SnapshotRecorder> recorder_;
};

/// The RunOptions of a run resumed from `resume` ("" = a new run), written to `out` ("" = the
/// config's run.out), replacing a run there when `overwrite`, stopping after `stop_after` steps
/// (0 = run to the end): `qkv train`'s --resume, --out, --overwrite and --stop-after and
/// qkv.train's arguments.
train::RunOptions run_options(const std::string& resume, const std::string& out, bool overwrite, std::int64_t stop_after);

/// What a run says at its start about its products' precision (train.precision), for every front
/// end: "precision: bf16, bf16 products: oneDNN 2.6.3 matmul (brg:avx512_core_amx_bf16)", the note
/// of a bf16 config that trains in float32 ("qkv: train.precision: bf16: ...; training in
/// float32"), or "" for float32 as asked.
std::string precision_message(const train::Session& s);

/// train::run_training, with snapshots on the root rank when the config asks for them, at
/// `threads` threads, else train.threads when it is > 0 (the OpenMP thread count; 0 and 0 leave
/// it as it is).
train::RunResult train_with_snapshots(const config::Config& cfg, const train::RunOptions& options, const train::Callbacks& extra,
                              dist::Comm& comm, const std::function<void(const std::string&)>& note = {}, int threads = 0);

}  // namespace qkv::runs
