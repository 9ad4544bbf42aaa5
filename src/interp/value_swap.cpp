#include "qkv/interp/value_swap.hpp"

#include <algorithm>

#include "qkv/autograd/tape.hpp"
#include "qkv/tensor/random.hpp"
#include "qkv/train/evaluate.hpp"

namespace qkv::interp {

namespace {
// Predictions (B, Tt) of the model on `b`, in batches.
IndexArray predictions(train::TaskModel& model, const data::Batch& b, std::size_t batch_size) {
  NoGradGuard no_grad;
  IndexArray out = IndexArray::from_shape(b.targets.shape());
  const std::size_t N = b.size(), Tt = b.targets.shape()[1];
  for (std::size_t lo = 0; lo < N; lo += batch_size) {
    const data::Batch part = train::rows(b, lo, std::min(N, lo + batch_size));
    const IndexArray p = model.predict(part, model.logits(part).value());
    std::copy(p.begin(), p.end(), out.data() + lo * Tt);
  }
  return out;
}
}  // namespace

ValueSwapResult value_swap(train::TaskModel& model, const data::Task& task, const data::Batch& batch,
                           std::uint64_t seed, std::size_t batch_size) {
  const bool s2s = task.name() == "seq2seq_recall";
  if (task.name() != "recall" && !s2s)
    throw ValueError("value swap: needs a recall or seq2seq_recall model, found task '" + task.name() + "'");
  const Index V = Index(task.num_classes());  // keys in [0, V), values in [V, 2V)
  data::Batch swapped = batch;
  const IndexArray& queries = s2s ? batch.decoder_inputs : batch.inputs;
  const std::size_t N = batch.size(), T = batch.inputs.shape()[1], Tq = batch.targets.shape()[1];
  // Per example: the swapped key's queries (target positions), their old and new classes.
  IndexArray old_targets = IndexArray::from_shape(batch.targets.shape());
  std::fill(old_targets.begin(), old_targets.end(), data::kIgnore);
  std::fill(swapped.targets.begin(), swapped.targets.end(), data::kIgnore);
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
    swapped.inputs(b, j + 1) = new_value;
    ++r.examples;
    for (std::size_t q = 0; q < Tq; ++q)
      if (batch.targets(b, q) != data::kIgnore && queries(b, q) == key) {
        old_targets(b, q) = old_value - V;
        swapped.targets(b, q) = new_value - V;
        ++r.queries;
      }
  }
  if (r.queries == 0) return r;
  const IndexArray before = predictions(model, batch, batch_size), after = predictions(model, swapped, batch_size);
  std::size_t intact = 0, follow = 0, stay = 0;
  for (std::size_t k = 0; k < old_targets.size(); ++k) {
    if (old_targets.data()[k] == data::kIgnore) continue;
    intact += before.data()[k] == old_targets.data()[k];
    follow += after.data()[k] == swapped.targets.data()[k];
    stay += after.data()[k] == old_targets.data()[k];
  }
  r.intact = double(intact) / double(r.queries);
  r.follow = double(follow) / double(r.queries);
  r.stay = double(stay) / double(r.queries);
  return r;
}

}  // namespace qkv::interp
