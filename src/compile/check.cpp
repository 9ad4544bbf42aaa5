// A compiled model against its program: every input of the domain (or a large sample), every
// position, the model's argmax against the reference interpreter.
#include <limits>

#include "qkv/autograd/tape.hpp"
#include "qkv/compile/compile.hpp"
#include "qkv/data/program_task.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::compile {

namespace {

// The number of inputs of lengths 1..max_len over V tokens; 0 when it passes 2^63.
std::size_t domain_size(std::size_t V, std::size_t N) {
  const std::size_t cap = std::size_t(1) << 63;
  std::size_t total = 0, power = 1;
  for (std::size_t n = 1; n <= N; ++n) {
    if (power > cap / V) return 0;
    power *= V;
    total += power;
    if (total > cap) return 0;
  }
  return total;
}

// Input `i` of the domain in order: all of length 1, then 2, ...; within a length, counting in
// base V with the last token fastest.
std::vector<std::size_t> nth_input(std::size_t i, std::size_t V, std::size_t N) {
  std::size_t power = V;
  for (std::size_t n = 1; n <= N; ++n, power *= V) {
    if (i < power) {
      std::vector<std::size_t> t(n);
      for (std::size_t k = n; k-- > 0; i /= V) t[k] = i % V;
      return t;
    }
    i -= power;
  }
  return {};
}

}  // namespace

CheckResult check_model(model::TaskModel& model, const rasp::Program& p, std::size_t limit, std::uint64_t seed,
                        std::size_t batch) {
  const data::ProgramLayout l = data::program_layout(p);
  CheckResult r;
  r.domain = domain_size(l.tokens, p.max_len);
  r.exhaustive = r.domain != 0 && r.domain <= limit;
  r.inputs = r.exhaustive ? r.domain : limit;
  const std::vector<rasp::Value>& classes = p.nodes[p.output].values;
  auto label = [&](Index c) { return c >= 0 && std::size_t(c) < classes.size() ? classes[std::size_t(c)].label() : "class " + std::to_string(c); };
  NoGradGuard no_grad;
  for (std::size_t start = 0; start < r.inputs; start += batch) {
    const std::size_t B = std::min(batch, r.inputs - start), T = l.length;
    data::Batch b;
    b.inputs = IndexArray::from_shape({B, T});
    b.targets = IndexArray::from_shape({B, T});
    b.decoder_inputs = IndexArray::from_shape({0});
    std::vector<std::vector<std::size_t>> tokens(B);
    for (std::size_t row = 0; row < B; ++row) {
      if (r.exhaustive) {
        tokens[row] = nth_input(start + row, l.tokens, p.max_len);
      } else {
        Generator gen(hash64(seed, start + row));
        tokens[row].resize(1 + gen.randint(p.max_len));
        for (auto& t : tokens[row]) t = gen.randint(l.tokens);
      }
      data::program_row(p, tokens[row], b.inputs.data() + row * T, b.targets.data() + row * T);
    }
    const IndexArray predicted = model::argmax_last(model.logits(b).value());
    for (std::size_t row = 0; row < B; ++row)
      for (std::size_t i = 0; i < tokens[row].size(); ++i) {
        const Index want = b.targets(row, 1 + i), got = predicted(row, 1 + i);
        if (want == data::kIgnore) {
          ++r.skipped;
          continue;
        }
        ++r.positions;
        if (want == got) {
          ++r.correct;
        } else if (r.first_error.empty()) {
          std::string in;
          for (std::size_t t : tokens[row]) in += (in.empty() ? "" : " ") + p.vocab[t].label();
          r.first_error = "input '" + in + "', position " + std::to_string(i) + ": the program gives " + label(want) +
                          ", the model " + label(got);
        }
      }
  }
  return r;
}

}  // namespace qkv::compile
