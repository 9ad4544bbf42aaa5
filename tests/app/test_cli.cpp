// The qkv command line, run as a user runs it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "train/train_fixtures.hpp"

using namespace qkv;
namespace fs = std::filesystem;

namespace {

std::string qkv_cmd(const std::string& args) { return std::string(QKV_CLI_PATH) + " " + args; }

const char* kTiny =
    "--set model.d_model=32 --set model.heads=2 --set model.layers=1 --set model.d_ff=64 "
    "--set task.vocab=8 --set task.length=8 --set task.eval_size=64 --set train.batch_size=32 "
    "--set train.eval_every=10 --set train.checkpoint_every=10 --set train.threads=1 --set schedule.warmup_steps=5 ";

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The CPU's feature flags, read from /proc/cpuinfo (not from the code under test).
std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) return line + " ";
  return "";
}
bool has_flag(const std::string& flags, const std::string& f) { return flags.find(" " + f + " ") != std::string::npos; }

// The kernel `qkv info` reports ("kernel NAME [").
std::string info_kernel(const std::string& out) {
  const auto at = out.find(", kernel ");
  return at == std::string::npos ? "" : out.substr(at + 9, out.find(" [", at) - at - 9);
}

}  // namespace

TEST_CASE("cli: every command has --help") {
  for (const char* cmd : {"", "train", "eval", "inspect", "attention", "logits", "gradcheck", "sweep", "info"}) {
    std::string out;
    CHECK_MESSAGE(test::run_command(qkv_cmd(std::string(cmd) + " --help"), &out) == 0, cmd);
    CHECK(out.find("Usage") != std::string::npos);
  }
}

TEST_CASE("cli: the BLAS core type comes from the CPU features, not from an inherited slower one") {
  const std::string flags = cpu_flags();
  const bool avx512 = has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") && has_flag(flags, "avx512vl") &&
                      has_flag(flags, "avx512dq") && has_flag(flags, "avx512cd");
  const bool avx2 = has_flag(flags, "avx2") && has_flag(flags, "fma");
  std::string out;
  // An inherited OPENBLAS_CORETYPE of older kernels is replaced where the CPU runs better ones.
  REQUIRE(test::run_command("env -u QKV_BLAS_CORETYPE OPENBLAS_CORETYPE=Prescott " + qkv_cmd("info"), &out) == 0);
  if (avx512 || avx2) {
    CHECK(info_kernel(out) == (avx512 ? "SkylakeX" : "Haswell"));
    CHECK(out.find("OPENBLAS_CORETYPE=Prescott in the environment not used (slower kernels") != std::string::npos);
  } else {
    CHECK(info_kernel(out) == "Prescott");
  }
  // One of the same level is kept.
  if (avx2 && !avx512) {
    REQUIRE(test::run_command("env -u QKV_BLAS_CORETYPE OPENBLAS_CORETYPE=Zen " + qkv_cmd("info"), &out) == 0);
    CHECK(info_kernel(out) == "Zen");
  }
  // QKV_BLAS_CORETYPE forces one, whatever OPENBLAS_CORETYPE says.
  REQUIRE(test::run_command("OPENBLAS_CORETYPE=Haswell QKV_BLAS_CORETYPE=Prescott " + qkv_cmd("info"), &out) == 0);
  CHECK(info_kernel(out) == "Prescott");
  CHECK(out.find("QKV_BLAS_CORETYPE=Prescott from the environment") != std::string::npos);
  // A name OpenBLAS does not know, or kernels this CPU cannot run: status 2, naming the variable.
  CHECK(test::run_command("QKV_BLAS_CORETYPE=Skylake-X " + qkv_cmd("info"), &out) == 2);
  CHECK(out.find("QKV_BLAS_CORETYPE=Skylake-X: not an OpenBLAS x86-64 core type; expected one of SkylakeX") !=
        std::string::npos);
  if (!avx512) {
    CHECK(test::run_command("QKV_BLAS_CORETYPE=SkylakeX " + qkv_cmd("info"), &out) == 2);
    CHECK(out.find("this CPU lacks the instructions SkylakeX's kernels use") != std::string::npos);
  }
}

TEST_CASE("cli: train, then eval, inspect and attention on the checkpoint") {
  const std::string dir = test::temp_dir("cli_train");
  std::string out;
  const std::string sort = std::string(QKV_SOURCE_DIR) + "/configs/sort.yaml";
  REQUIRE(test::run_command(qkv_cmd("train " + sort + " " + kTiny + "--set train.steps=30 --out " + dir), &out) == 0);
  CHECK(out.find("qkv heads " + dir + "/best.h5") != std::string::npos);
  CHECK(out.find("BLAS: OpenBLAS") != std::string::npos);

  REQUIRE(test::run_command(qkv_cmd("eval " + dir + "/last.h5"), &out) == 0);
  CHECK(out.find("token accuracy") != std::string::npos);

  REQUIRE(test::run_command(qkv_cmd("inspect " + dir + "/last.h5"), &out) == 0);
  CHECK(out.find("blocks.0.attn.w_q.weight") != std::string::npos);
  CHECK(out.find("format_version") != std::string::npos);
  CHECK(out.find("d_model: 32") != std::string::npos);

  REQUIRE(test::run_command(qkv_cmd("attention " + dir + "/last.h5 --example 3 --out " + dir + "/attn.csv"), &out) == 0);
  CHECK(out.find("blocks.0.attn") != std::string::npos);
  std::ifstream csv(dir + "/attn.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header == "layer,head,query,key,query_token,key_token,weight");
  std::size_t rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  CHECK(rows == 2 * 8 * 8);  // heads x queries x keys
}

TEST_CASE("cli: train.precision bf16 where it does not pay trains in float32 saying so, and --strict refuses it") {
  // oneDNN limited to AVX512-BF16 (ONEDNN_MAX_CPU_ISA, read by oneDNN itself) stands in for a CPU
  // without AMX; without oneDNN or AMX the outcome is the same.
  const std::string dir = test::temp_dir("cli_bf16");
  const std::string sort = std::string(QKV_SOURCE_DIR) + "/configs/sort.yaml";
  const std::string run = "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 " +
                          qkv_cmd("train " + sort + " " + kTiny + "--set train.steps=6 --set train.precision=bf16 --out " + dir);
  std::string out;
  REQUIRE(test::run_command(run + " --overwrite", &out) == 0);
  CHECK(out.find("train.precision: bf16: ") != std::string::npos);
  CHECK(out.find("training in float32") != std::string::npos);
  CHECK(test::run_command(run + "2 --strict", &out) == 2);
  CHECK(out.find("train.precision: bf16 refused by --strict") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "2"));
  REQUIRE(test::run_command(qkv_cmd("info"), &out) == 0);
  CHECK(out.find("bf16 products: ") != std::string::npos);
}

TEST_CASE("cli: bad configs exit with status 2, name file, line and key, and leave no run directory") {
  const std::string dir = test::temp_dir("cli_bad");
  const std::string cfg = dir + "/bad.yaml";
  write(cfg, "model:\n  d_model: 64\n  heds: 4\nrun:\n  out: " + dir + "/run\n");
  std::string out;
  CHECK(test::run_command(qkv_cmd("train " + cfg), &out) == 2);
  CHECK(out.find(cfg + ":3") != std::string::npos);
  CHECK(out.find("heds") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/run"));

  write(cfg, "model:\n  d_model: 64\n  heads: 5\nrun:\n  out: " + dir + "/run\n");
  CHECK(test::run_command(qkv_cmd("train " + cfg), &out) == 2);
  CHECK(out.find("heads") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/run"));

  write(cfg, "run:\n  out: " + dir + "/run\n");
  CHECK(test::run_command(qkv_cmd("train " + cfg + " --set model.dropout=1.5"), &out) == 2);
  CHECK(out.find("model.dropout") != std::string::npos);
  CHECK(test::run_command(qkv_cmd("train " + cfg + " --set model.nope=1"), &out) == 2);
  CHECK(out.find("nope") != std::string::npos);
  CHECK(test::run_command(qkv_cmd("train " + dir + "/missing.yaml"), &out) == 2);
  CHECK(out.find("missing.yaml") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/run"));
}

TEST_CASE("cli: bad checkpoints give a clear error and a non-zero exit") {
  const std::string dir = test::temp_dir("cli_badckpt");
  write(dir + "/garbage.h5", "this is not an HDF5 file");
  std::string out;
  for (const char* cmd : {"eval", "inspect", "attention"}) {
    const int status = test::run_command(qkv_cmd(std::string(cmd) + " " + dir + "/garbage.h5"), &out);
    CHECK(status != 0);
    CHECK(status < 128);  // an error, not a crash
    CHECK(out.find("garbage.h5") != std::string::npos);
  }
  CHECK(test::run_command(qkv_cmd("eval " + dir + "/nothing.h5"), &out) != 0);
  CHECK(out.find("nothing.h5") != std::string::npos);
}
