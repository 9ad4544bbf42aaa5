#include "qkv/interp/value_swap.hpp"

#include "qkv/io/json.hpp"

#include <algorithm>

#include "qkv/tensor/random.hpp"
#include "qkv/model/evaluate.hpp"

namespace qkv::interp {

ValueSwapResult value_swap(model::TaskModel& model, const data::Task& task, const data::Batch& batch,
                           std::uint64_t seed, std::size_t batch_size) {
  const bool s2s = task.name() == "seq2seq_recall";
  if (task.name() != "recall" && !s2s)
    throw ValueError("model: the swap probe needs a recall or seq2seq_recall model, found task '" + task.name() + "'");
  const Index V = Index(task.num_classes());  // keys in [0, V), values in [V, 2V)
  IndexArray swapped = batch.inputs;
  const IndexArray& queries = s2s ? batch.decoder_inputs : batch.inputs;
  const std::size_t N = batch.size(), T = batch.inputs.shape()[1], Tq = batch.targets.shape()[1];
  // Per example: the swapped key's queries (target positions), their old and new classes.
  IndexArray old_targets = IndexArray::from_shape(batch.targets.shape()), new_targets = old_targets;
  std::fill(old_targets.begin(), old_targets.end(), data::kIgnore);
  std::fill(new_targets.begin(), new_targets.end(), data::kIgnore);
  ValueSwapResult r;
  for (std::size_t b = 0; b < N; ++b) {
    std::size_t i = 0;
    while (i < Tq && batch.targets(b, i) == data::kIgnore) ++i;
    if (i == Tq) continue;
    const Index key = queries(b, i);
    const std::size_t end = s2s ? T : i;  // recall: the pairs come before the queries
    std::size_t j = 0;  // the key's position among the pairs k1 v1 k2 v2 ...
    while (j + 1 < end && batch.inputs(b, j) != key) j += 2;
    if (j + 1 >= end) continue;
    Generator gen(hash64(seed, b));
    const Index old_value = batch.inputs(b, j + 1);
    Index new_value = V + Index(gen.randint(std::size_t(V - 1)));
    if (new_value >= old_value) ++new_value;  // uniform over the V - 1 other values
    swapped(b, j + 1) = new_value;
    ++r.examples;
    for (std::size_t q = 0; q < Tq; ++q)
      if (batch.targets(b, q) != data::kIgnore && queries(b, q) == key) {
        old_targets(b, q) = old_value - V;
        new_targets(b, q) = new_value - V;
        ++r.queries;
      }
  }
  if (r.queries == 0) return r;
  // Token accuracies over the swapped keys' queries only (every other target is kIgnore).
  const auto accuracy = [&](const IndexArray& inputs, const IndexArray& targets) {
    return model::evaluate(model, data::Batch{inputs, targets, batch.decoder_inputs}, batch_size).token_accuracy;
  };
  r.intact = accuracy(batch.inputs, old_targets);
  r.follow = accuracy(swapped, new_targets);
  r.stay = accuracy(swapped, old_targets);
  return r;
}

ValueSwapResult value_swap(model::LoadedModel& l, const SwapRequest& r) {
  if (!l.data) field_error("data", "the swap probe runs on the model's held-out data, which was not loaded");
  const data::Batch& test = l.data->test_set();
  ValueSwapResult out;
  as_field("model", [&] { out = value_swap(*l.model, *l.task, data::rows(test, 0, r.examples ? std::min(r.examples, test.size()) : test.size()), r.seed); });
  return out;
}

std::string to_json(const ValueSwapResult& r) {
  json::Writer w;
  w.open('{').member("examples", r.examples).member("queries", r.queries).member("intact", r.intact)
      .member("follow", r.follow).member("stay", r.stay).close('}');
  return w.take();
}

}  // namespace qkv::interp
