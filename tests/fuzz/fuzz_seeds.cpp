// Writes seed checkpoints for the checkpoint fuzzer into the directory given as argv[1]: a small
// complete one, one with empty groups, and one with several tensors per group.
#include <cstdio>
#include <string>

#include "qkv/io/checkpoint.hpp"

using namespace qkv;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  io::Checkpoint empty;
  io::save_checkpoint(dir + "/empty.h5", empty);

  io::Checkpoint small;
  small.step = 7;
  small.config_yaml = "model:\n  d_model: 4\n";
  small.model = {{"embed.weight", full<float>({3, 4}, 0.5f)}, {"scalar", full<float>(Shape{}, 1.0f)}};
  small.optimizer_step = 7;
  small.optimizer = {{"exp_avg/embed.weight", full<float>({3, 4}, 0.25f)}};
  small.rng = {{"data", {1, 2}}};
  small.scalars = {{"best_accuracy", 0.5}};
  small.metrics = {{"step", {1, 2, 3}}, {"loss", {3.0, 2.0, 1.0}}};
  io::save_checkpoint(dir + "/small.h5", small);

  io::Checkpoint wide = small;
  for (int i = 0; i < 6; ++i)
    wide.model.emplace_back("blocks." + std::to_string(i) + ".w", full<float>({2, 2}, static_cast<float>(i)));
  wide.metrics.emplace_back("accuracy", std::vector<double>(20, 0.25));
  io::save_checkpoint(dir + "/wide.h5", wide);
  return 0;
}
