#pragma once
// Models whose attention is known because its weights are set by hand, for testing the
// instruments against answers worked out on paper.

#include <memory>
#include <string>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::test {

// A one-layer attention-only decoder over T = 16 positions and V = 8 tokens, width C = 2T + V =
// 40, two heads of width 20:
//   x_i = pos_i + tok(v) = e_i - e_{T+i} + e_{2T+v}, then LayerNorm: n_i
//   head 0: q = c n[0:T), k_j = n_j shifted by one (k[m] = n[m-1]): q_i . k_j peaks at j = i - 1,
//           a previous-token head; v = the token part n[2T:2T+V)
//   head 1: q = c sum_{m<T} n[m] in one dimension, k_j = n_j[0:T): peaks at j = 0, a first-token
//           head; its w_o columns are zero, so it carries nothing to the output
//   w_o writes b * (head 0's value) onto the token dimensions; the unembedding reads them.
// On "predict the previous token" batches (previous_token_batch) the model is right at every
// scored position; without head 0 it predicts the current token instead.
struct Constructed {
  static constexpr std::size_t T = 16, V = 8, C = 2 * T + V;
  config::Config cfg;
  std::shared_ptr<data::Task> task;  // induction (V, T): only its sizes matter here
  std::unique_ptr<model::TaskModel> model;
};
Constructed constructed_decoder(double c = 8.0, double b = 4.0);

// A one-layer attention-only encoder over the Chinese grammar (masked objective), width 256, two
// heads of 128, token embeddings one-hot, positions zero:
//   head 0: q[0] = c * (the token is a verb character: 打 吃 追 逐 爱 喜 欢), k[0] = (an object
//           character: 花 瓶 苹 果 老 鼠 鱼): from a verb, the largest weight falls on the first
//           object character of the row (a hand-set "what" head)
//   head 1: the same query, k[0] = (a subject character: 他 我 猫): a "who" head
//   every other query is uniform. Nothing is written to the output (w_o = 0).
Constructed constructed_role_encoder(double c = 40.0);

// B rows of random tokens in [0, V) with targets[t] = inputs[t - 1] (t >= 1; kIgnore at 0).
data::Batch previous_token_batch(std::size_t B, std::size_t T, std::size_t V, std::uint64_t seed);

}  // namespace qkv::test
