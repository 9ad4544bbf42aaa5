// The MPI process group (built only when CMake finds MPI).
// The C API only: OpenMPI and MPICH would otherwise pull in their deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <thread>

#include "qkv/dist/comm.hpp"

namespace qkv::dist {
namespace {

class MpiComm : public Comm {
 public:
  MpiComm() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }

  // Reduce to rank 0, then broadcast: every rank gets the very same bits (an allreduce may round
  // differently on different ranks), and the summation order is fixed for a given rank count.
  void allreduce_sum(float* data, std::size_t n) override { reduce_bcast(data, n, MPI_FLOAT); }
  void allreduce_sum(double* data, std::size_t n) override { reduce_bcast(data, n, MPI_DOUBLE); }

  void broadcast(std::string& bytes) override {
    unsigned long long n = bytes.size();
    MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    bytes.resize(n);
    MPI_Bcast(bytes.data(), int(n), MPI_CHAR, 0, MPI_COMM_WORLD);
  }
  // MPI_Barrier busy-polls (OpenMPI spins at 100% of a core): a sweep rank with no runs left would
  // take a core from the ranks still training. Poll a non-blocking barrier with short sleeps.
  void barrier() override {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    int done = 0;
    for (MPI_Test(&request, &done, MPI_STATUS_IGNORE); !done; MPI_Test(&request, &done, MPI_STATUS_IGNORE))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<std::uint64_t> allgather(std::uint64_t value) override {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
    MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    return all;
  }
  [[noreturn]] void abort(int code) override {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }
  std::string description() const override {
    return "MPI rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }

 private:
  template <class T>
  void reduce_bcast(T* data, std::size_t n, MPI_Datatype type) {
    constexpr std::size_t kMax = std::size_t(1) << 30;  // MPI counts are int
    for (std::size_t off = 0; off < n; off += kMax) {
      const int count = int(std::min(kMax, n - off));
      if (rank_ == 0)
        MPI_Reduce(MPI_IN_PLACE, data + off, count, type, MPI_SUM, 0, MPI_COMM_WORLD);
      else
        MPI_Reduce(data + off, nullptr, count, type, MPI_SUM, 0, MPI_COMM_WORLD);
      MPI_Bcast(data + off, count, type, 0, MPI_COMM_WORLD);
    }
  }
  int rank_ = 0, size_ = 1, local_size_ = 1;
};

}  // namespace

Comm& world() {
  static Comm single;
  if (!launched_by_mpi()) return single;
  static MpiComm mpi;
  return mpi;
}

}  // namespace qkv::dist
