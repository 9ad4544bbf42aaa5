// A compiled who/what model graded against grammar v2's gold roles (interp::score_roles): at
// every verb of N sentences drawn from the grammar, is the word its "who" head points at the
// verb's gold subject, the word its "what" head points at its gold object, and the word its
// "result" head points at its gold result? Then the same with each head removed. docs/compile.md quotes its output:
//   ./build/qkv compile programs/who_what_zh.rasp --out who_what_zh.h5
//   ./build/example_who_what_roles who_what_zh.h5 [N=2000] [SEED=1]
#include <cstdio>
#include <exception>
#include <string>

#include "qkv/interp/roles.hpp"

using namespace qkv;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s COMPILED.h5 [SENTENCES] [SEED]\n", argv[0]);
    return 2;
  }
  try {
    const io::Checkpoint checkpoint = io::load_checkpoint(argv[1]);
    model::LoadedModel m = model::load_model(checkpoint, argv[1], {}, false);
    const auto info = model::compiled_info(checkpoint, argv[1]);
    if (!info) throw ValueError(std::string(argv[1]) + ": not a compiled model (no /compiled group)");
    const std::size_t n = argc > 2 ? std::stoul(argv[2]) : 2000;
    const std::uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 1;
    const auto grammar = data::load_grammar("v2", data::Language::Zh);
    std::vector<std::pair<std::string, interp::HeadRef>> heads;  // who, what, result: in program order
    for (auto& op : info->ops)
      if (op.op == "aggregate" && (op.sop == "who" || op.sop == "what" || op.sop == "result"))
        heads.push_back({op.sop, {op.layer, op.head}});
    const interp::RoleScores all = interp::score_roles(m, *info, *grammar, n, seed);
    std::printf("%zu sentences of grammar v2 (zh) with at most %zu words (seed %llu; %zu longer ones skipped)\n\n",
                all.sentences, m.task->input_length() - 1, (unsigned long long)seed, all.too_long);
    std::printf("%s\n", interp::format_role_scores(all).c_str());
    for (const auto& [name, head] : heads) {
      const interp::RoleCounts c = interp::score_roles(m, *info, *grammar, n, seed, {head}).all;
      std::printf("without the %s head %s: who %zu / %zu right, what %zu / %zu right, result %zu / %zu right\n",
                  name.c_str(), interp::head_name(head).c_str(), c.who_right, c.who, c.what_right, c.what,
                  c.result_right, c.result);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
