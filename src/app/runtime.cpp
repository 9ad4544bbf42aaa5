#include "runtime.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "qkv/kernels/blas.hpp"

namespace qkv::app {
namespace {

std::string g_core_type_source = "detected by OpenBLAS";
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }
using Handler = void (*)(int);
Handler g_previous = SIG_DFL;

// Puts OPENBLAS_CORETYPE in the environment (before OpenBLAS is opened) and says where it came
// from; the error of an unusable QKV_BLAS_CORETYPE, or "".
std::string choose_core_type() {
  const char* forced = std::getenv("QKV_BLAS_CORETYPE");
  const char* inherited = std::getenv("OPENBLAS_CORETYPE");
  const std::string env = inherited && *inherited ? inherited : "";
  if (forced && *forced) {
    const std::string problem = kernels::blas_core_type_problem(forced);
    if (!problem.empty()) {
      const std::string best = kernels::blas_core_type_for_cpu();
      return "QKV_BLAS_CORETYPE=" + problem + "; unset it to let qkv choose (" +
             (best.empty() ? "OpenBLAS's detection" : best) + " here)";
    }
    setenv("OPENBLAS_CORETYPE", forced, 1);
    g_core_type_source = std::string("QKV_BLAS_CORETYPE=") + forced + " from the environment";
    return "";
  }
  const std::string best = kernels::blas_core_type_for_cpu();
  if (best.empty()) {
    g_core_type_source = env.empty() ? "detected by OpenBLAS" : "OPENBLAS_CORETYPE=" + env + " from the environment";
    return "";
  }
  if (!env.empty()) {
    const int level = kernels::blas_core_type_level(env);
    if (level == kernels::blas_core_type_level(best) && kernels::blas_core_type_problem(env).empty()) {
      g_core_type_source = "OPENBLAS_CORETYPE=" + env + " from the environment (the level of " + best +
                           ", qkv's choice from the CPU features)";
      return "";
    }
    const char* why = level < 0 ? "not a core type OpenBLAS knows"
                      : kernels::blas_core_type_problem(env).empty() ? "slower kernels than this CPU runs"
                                                                     : "kernels this CPU cannot run";
    g_core_type_source = "chosen by qkv from the CPU features; OPENBLAS_CORETYPE=" + env +
                         " in the environment not used (" + why + "; QKV_BLAS_CORETYPE forces a core type)";
  } else {
    g_core_type_source = "chosen by qkv from the CPU features";
  }
  setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
  return "";
}

}  // namespace

std::string prepare_process(char** argv) {
#ifdef _OPENMP
  if (!std::getenv("OMP_WAIT_POLICY") && argv) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // exec failed: carry on as started
  }
#else
  (void)argv;
#endif
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  return choose_core_type();
}

std::string blas_description() { return kernels::blas_info() + " [" + g_core_type_source + "], 1 thread per call"; }

InterruptScope::InterruptScope() {
  g_interrupted = false;
  g_previous = std::signal(SIGINT, on_sigint);
}
InterruptScope::~InterruptScope() { std::signal(SIGINT, g_previous); }
bool InterruptScope::requested() { return g_interrupted; }

}  // namespace qkv::app
