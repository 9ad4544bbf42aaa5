// Clean and corrupted rows of a program's task: one token apart, the output different somewhere.
#include "qkv/data/contrast.hpp"

#include "qkv/data/program_task.hpp"
#include "qkv/rasp/evaluate.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::data {

namespace {

Batch row_of(const rasp::Program& p, const std::vector<std::size_t>& tokens) {
  const ProgramLayout l = program_layout(p);
  std::vector<Index> in(l.length), tg(l.length);
  program_row(p, tokens, in.data(), tg.data());
  Batch b;
  b.inputs = IndexArray::from_shape({1, tokens.size() + 1});
  b.targets = IndexArray::from_shape({1, tokens.size() + 1});
  std::copy(in.begin(), in.begin() + long(tokens.size() + 1), b.inputs.data());
  std::copy(tg.begin(), tg.begin() + long(tokens.size() + 1), b.targets.data());
  return b;
}

}  // namespace

std::vector<ContrastPair> program_contrast_pairs(const rasp::Program& p, std::size_t count, std::uint64_t seed) {
  std::vector<ContrastPair> pairs;
  const std::size_t V = p.vocab.size();
  if (V < 2 || p.max_len < 2) throw ValueError(p.path + ": contrast pairs need at least 2 tokens and max_len >= 2");
  Generator gen(seed);
  for (std::size_t draw = 0; draw < 10000 && pairs.size() < count; ++draw) {
    std::vector<std::size_t> clean(2 + gen.randint(p.max_len - 1));
    for (auto& t : clean) t = gen.randint(V);
    // Each token redrawn with probability 1/2, one of them at least: a single changed token would
    // never change the answer through *which* keys a head selects (induction's previous-token head,
    // say), only through what the selected keys hold.
    std::vector<std::size_t> corrupt = clean;
    const std::size_t j = gen.randint(clean.size());
    for (std::size_t i = 0; i < clean.size(); ++i)
      if (i == j || gen.randint(2) == 1) corrupt[i] = (clean[i] + 1 + gen.randint(V - 1)) % V;  // another token
    const std::vector<rasp::Cell> a = rasp::run(p, clean), b = rasp::run(p, corrupt);
    std::vector<std::size_t> differ;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i].some() && b[i].some() && a[i].value != b[i].value) differ.push_back(i);
    if (differ.empty()) continue;
    const std::size_t i = differ[gen.randint(differ.size())];
    ContrastPair c;
    c.clean = row_of(p, clean);
    c.corrupt = row_of(p, corrupt);
    c.position = 1 + i;
    c.answer = Index(p.value_index(p.output, a[i].value));
    c.wrong = Index(p.value_index(p.output, b[i].value));
    pairs.push_back(std::move(c));
  }
  if (pairs.size() < count)
    throw ValueError(p.path + ": found " + std::to_string(pairs.size()) + " of " + std::to_string(count) +
                     " clean/corrupted pairs in 10,000 draws (one token must change the output somewhere)");
  return pairs;
}

}  // namespace qkv::data
