#include "qkv/dist/comm.hpp"

#include <cstdlib>

namespace qkv::dist {

void Comm::abort(int code) { std::exit(code); }

bool launched_by_mpi() {
  if (std::getenv("QKV_NO_MPI")) return false;  // set by `qkv sweep` for the runs it starts
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(var)) return true;
  return false;
}

#ifndef QKV_HAVE_MPI
Comm& world() {
  static Comm single;
  return single;
}
#endif

}  // namespace qkv::dist
