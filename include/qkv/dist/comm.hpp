#pragma once
/// @file
/// The process group a training run spans. One process: a no-op group of size 1. Under
/// `mpirun -np N`, an MPI group (src/dist/mpi_comm.cpp, built when MPI is found): gradients are
/// averaged with allreduce over flat, bucketed buffers; rank 0 alone writes files.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qkv::dist {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  /// Ranks of this group on this machine (this one included): cores are shared among them.
  virtual int local_size() const { return 1; }
  bool is_root() const { return rank() == 0; }
  /// In place: buffer = sum over ranks (every rank gets the same result, same bits).
  virtual void allreduce_sum(float* data, std::size_t n) {}
  virtual void allreduce_sum(double* data, std::size_t n) {}
  /// Root's bytes to every rank.
  virtual void broadcast(std::string& bytes) {}
  /// Wait for every rank. Under MPI it sleeps between polls instead of spinning, so a rank that
  /// waits (e.g. a sweep rank with no runs left) does not take a core from those still working.
  virtual void barrier() {}
  /// Gather one value per rank at every rank.
  virtual std::vector<std::uint64_t> allgather(std::uint64_t value) { return {value}; }
  /// Stop every rank (MPI_Abort under MPI; exit otherwise).
  [[noreturn]] virtual void abort(int code);
  virtual std::string description() const { return "1 process"; }
};

/// The group of this process: MPI when launched by mpirun (and built with MPI), else size 1.
/// Initialises MPI on first call; finalised at exit. Throws ValueError when the launcher started
/// several processes but this build has no MPI (each would otherwise train alone, all writing
/// the same files).
Comm& world();
/// True when this process was started by an MPI launcher (mpirun/srun environment variables)
/// and QKV_NO_MPI is not set.
bool launched_by_mpi();
/// The number of processes the launcher says it started (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
/// SLURM_NTASKS under srun), or 1.
int launcher_world_size();

}  // namespace qkv::dist
