#include "qkv/dist/comm.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "qkv/tensor/tensor.hpp"

namespace qkv::dist {

void Comm::abort(int code) { std::exit(code); }

bool launched_by_mpi() {
  if (std::getenv("QKV_NO_MPI")) return false;  // set by `qkv sweep` for the runs it starts
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(var)) return true;
  return false;
}

int launcher_world_size() {
  // SLURM_NTASKS alone is set for the batch script too; only a step started by srun has SLURM_STEP_ID.
  const bool srun = std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_PROCID");
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", srun ? "SLURM_NTASKS" : "QKV_UNSET_"})
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  return 1;
}

#ifndef QKV_HAVE_MPI
Comm& world() {
  static Comm single;
  if (launched_by_mpi() && launcher_world_size() > 1)
    throw ValueError("this qkv was built without MPI (QKV_MPI=OFF or MPI not found) but was started as one of " +
                     std::to_string(launcher_world_size()) +
                     " processes by an MPI launcher; every process would train alone and write the same files. "
                     "Rebuild with MPI, or run without mpirun/srun");
  return single;
}
#endif

}  // namespace qkv::dist
