#pragma once
// A training run as the qkv command makes it, for every program of the application (the command,
// the Python module, tests): train::run_training plus training snapshots (interp/snapshots.hpp)
// when train.snapshot_every > 0. Training and the instruments meet here, above both.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "qkv/interp/snapshots.hpp"
#include "qkv/train/run_directory.hpp"

namespace qkv::app {

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

/// The RunOptions of `qkv train`'s --resume, --out, --overwrite and --stop-after (the command's
/// and qkv.train's from Python).
train::RunOptions run_options(const std::string& resume, const std::string& out, bool overwrite, std::int64_t stop_after);

/// What a run says at its start about its products' precision (train.precision), for every front
/// end: "precision: bf16, bf16 products: oneDNN 2.6.3 matmul (brg:avx512_core_amx_bf16)", the note
/// of a bf16 config that trains in float32 ("qkv: train.precision: bf16: ...; training in
/// float32"), or "" for float32 as asked.
std::string precision_message(const train::Session& s);

/// train::run_training, with snapshots on the root rank when the config asks for them, at
/// `threads` threads, else train.threads when it is > 0 (the process's OpenMP setting; 0 and 0
/// leave it as it is).
train::RunResult run_training(const config::Config& cfg, const train::RunOptions& options, const train::Callbacks& extra,
                              dist::Comm& comm, const std::function<void(const std::string&)>& note = {}, int threads = 0);

}  // namespace qkv::app
