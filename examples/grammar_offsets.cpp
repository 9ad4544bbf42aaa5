// The best fixed offset of every relation of a grammar config, on its test set: what a head that
// only looks a fixed distance away scores as a role head (interp::role_baselines, the baseline
// row of `qkv heads`). A grammar where role and position disagree keeps these low, so a head that
// scores high is finding the role. Prints a Markdown table; experiments/grammar_v2/offsets.md is
// its output for the grammar v2 configs:
//   ./build/example_grammar_offsets configs/grammar_v2_zh.yaml configs/grammar_v2_en.yaml
// Each config's task builds the test set that `qkv heads` scores (Dataset(task, seed,
// eval_size).test_set()); every row of it is counted.
#include <cstdio>
#include <exception>

#include "qkv/config/config.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/interp/head_scores.hpp"

using namespace qkv;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CONFIG.yaml [CONFIG.yaml ...]\n", argv[0]);
    return 2;
  }
  try {
    std::printf("| config | grammar | language | relation | tokens | best offset | share |\n|---|---|---|---|---:|---:|---:|\n");
    for (int i = 1; i < argc; ++i) {
      const config::Config c = config::load_config(argv[i]);
      auto task = std::shared_ptr<const data::Task>(data::make_task(c.task));
      const data::Dataset d(task, c.seed, c.task.eval_size);
      const data::Batch& test = d.test_set();
      const auto baselines = interp::role_baselines(*task, test);
      for (std::size_t r = 0; r < baselines.size(); ++r)
        std::printf("| %s | %s | %s | %s | %zu | %+ld | %.3f |\n", argv[i], c.task.grammar.c_str(), data::name(c.task.language),
                    task->relation_names()[r].c_str(), baselines[r].count, baselines[r].offset, baselines[r].share);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
