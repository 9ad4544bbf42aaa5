#pragma once
/// @file
/// Data parallelism over a process group: what the training loop needs from MPI, in one object,
/// so that the loop itself has no branch on the number of processes. Alone (a group of size 1)
/// every call is a no-op or the identity, and costs nothing.
///
/// Each rank trains on its own rows of every global batch (data::Dataset::next_train_shard);
/// gradients are summed over ranks in a few large allreduce calls and divided by the rank count,
/// so every rank applies the same update; parameters are compared by checksum at checkpoints.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/autograd/variable.hpp"
#include "qkv/dist/comm.hpp"
#include "qkv/nn/module.hpp"

namespace qkv::dist {

class DataParallel {
 public:
  explicit DataParallel(Comm& comm) : comm_(comm) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  bool is_root() const { return comm_.is_root(); }
  Comm& comm() { return comm_; }

  /// values[i] = sum over ranks of values[i], in place (the same bits on every rank).
  void sum(double* values, std::size_t n);
  /// True on every rank when `flag` is true on any (a signal that reached some ranks only).
  bool any(bool flag);
  /// Every parameter's gradient becomes the mean over ranks of that gradient (a parameter with
  /// no gradient counts as zeros). Buckets of 4M floats per allreduce.
  void average_gradients(const std::vector<Variable<float>>& params);
  /// Every rank holds bitwise the same parameters (a 64-bit checksum of their bits compared);
  /// otherwise returns the first rank that differs (> 0) and its and rank 0's checksums.
  struct SyncReport {
    int differing_rank = 0;  ///< 0: in sync
    std::uint64_t checksum = 0, root_checksum = 0;
  };
  SyncReport check_in_sync(const nn::Module<float>& model);
  /// Seconds spent in the calls above (communication time), since construction.
  double seconds() const { return seconds_; }

 private:
  Comm& comm_;
  std::vector<float> flat_;
  double seconds_ = 0;
};

/// A 64-bit checksum of a module's parameters (their float bits, in order).
std::uint64_t parameter_checksum(const nn::Module<float>& model);

}  // namespace qkv::dist
