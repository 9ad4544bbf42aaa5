// Loading a checkpoint: a stored config that does not describe the stored weights, or that would
// need more memory than the budget, is refused before the model's tables are allocated.
#include <doctest/doctest.h>

#include "qkv/io/checkpoint.hpp"
#include "qkv/model/load.hpp"
#include "qkv/tensor/allocator.hpp"
#include "test_util.hpp"

namespace qkv {
namespace {

// A checkpoint of a tiny induction decoder whose stored config then says task.length = `length`.
std::string checkpoint_with_length(const std::string& name, const std::string& positional, std::size_t length) {
  const std::vector<std::string> base = {"model.arch=decoder", "model.d_model=16", "model.heads=2", "model.layers=1",
                                         "model.d_ff=32", "model.positional=" + positional, "task.name=induction",
                                         "task.vocab=8", "task.length=16"};
  const config::Config small = config::parse_config("{}", "load-test.yaml", base);
  std::shared_ptr<data::Task> task = data::make_task(small.task);
  Generator gen(1);
  io::Checkpoint c;
  c.model = model::make_model(small, *task, gen)->module().state_dict();
  std::vector<std::string> big = base;
  big.push_back("task.length=" + std::to_string(length));
  c.config_yaml = config::to_yaml(config::parse_config("{}", "load-test.yaml", big));
  const std::string path = test::temp_dir("load_" + name) + "/" + name;
  io::save_checkpoint(path, c);
  return path;
}

}  // namespace

TEST_CASE("load: weights that do not fit the stored config are refused before the model is allocated") {
  const std::string path = checkpoint_with_length("load_huge_learned.h5", "learned", 50000000);
  pool::reset_peak();
  const std::uint64_t before = pool::stats().in_use_bytes;
  std::string error;
  try {
    model::load_model(path, model::LoadOptions{{}, false, 0});
  } catch (const ValueError& e) {
    error = e.what();
  }
  CHECK(error.find("the checkpoint's model does not fit this model") != std::string::npos);
  CHECK(error.find("shape of pos.weight: the model has (50000000, 16), the checkpoint (16, 16)") != std::string::npos);
  // The 50000000 x 16 position table (3.2 GB) was never made.
  CHECK(pool::stats().peak_in_use_bytes - before < (std::uint64_t(64) << 20));
}

TEST_CASE("load: a model over the memory budget is refused naming task.length, before it is allocated") {
  const std::string path = checkpoint_with_length("load_huge_sinusoidal.h5", "sinusoidal", 50000000);
  pool::reset_peak();
  const std::uint64_t before = pool::stats().in_use_bytes;
  std::string error;
  try {
    model::load_model(path, model::LoadOptions{{}, false, std::size_t(1) << 30});
  } catch (const config::ConfigError& e) {
    error = e.what();
  }
  CHECK(error.find("task.length") != std::string::npos);
  CHECK(error.find("more than the 1.07 GB of memory available") != std::string::npos);
  CHECK(pool::stats().peak_in_use_bytes - before < (std::uint64_t(64) << 20));
  // Within its budget the same kind of file loads (a small length).
  const std::string fits = checkpoint_with_length("load_small_sinusoidal.h5", "sinusoidal", 16);
  CHECK(model::load_model(fits, model::LoadOptions{{}, false, std::size_t(1) << 30}).task->input_length() == 16);
}

}  // namespace qkv
