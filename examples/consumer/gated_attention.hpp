#pragma once
/// @file
/// A layer that qkv does not have, built from its public ops and modules: gated self-attention,
///   y = sigmoid(x W_g) * MHA(x, x, x)        (elementwise gate, as in gated attention units)
/// Shapes: x (B, T, E) -> y (B, T, E). W_g (E, E) is nn::Linear without bias ("gate.weight").
/// Parameters: "attn.w_q.weight" ... "attn.w_o.bias" (nn::MultiHeadAttention), "gate.weight".

#include <memory>
#include <utility>
#include <vector>

#include "qkv/nn/linear.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/nn/multi_head_attention.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/optim/adam.hpp"
#include "qkv/tensor/random.hpp"
#include "qkv/tensor/tensor.hpp"

namespace consumer {

/// sigmoid(z) = (1 + tanh(z / 2)) / 2: no exp overflow for large |z|; the backward comes from tanh.
template <class T>
qkv::Variable<T> sigmoid(const qkv::Variable<T>& z) {
  return T(0.5) * (T(1) + qkv::tanh(T(0.5) * z));
}

template <class T>
class GatedAttention : public qkv::nn::Module<T> {
 public:
  GatedAttention(std::size_t embed_dim, std::size_t num_heads, qkv::Generator& gen) {
    qkv::nn::MultiHeadAttentionOptions o;
    o.embed_dim = embed_dim;
    o.num_heads = num_heads;
    attn = this->register_module("attn", std::make_shared<qkv::nn::MultiHeadAttention<T>>(o, gen));
    gate = this->register_module("gate", std::make_shared<qkv::nn::Linear<T>>(embed_dim, embed_dim, false, gen));
  }

  qkv::Variable<T> forward(const qkv::Variable<T>& x, bool causal = false) const {
    qkv::nn::MultiHeadAttentionArgs<T> args;
    args.is_causal = causal;
    return sigmoid(gate->forward(x)) * attn->forward(x, x, x, args).output;
  }

  std::shared_ptr<qkv::nn::MultiHeadAttention<T>> attn;
  std::shared_ptr<qkv::nn::Linear<T>> gate;
};

/// Standard normal values of `shape`.
template <class T>
qkv::Array<T> randn(const qkv::Shape& shape, qkv::Generator& gen) {
  qkv::Array<T> a = qkv::empty<T>(shape);
  for (auto& v : a) v = T(gen.normal());
  return a;
}

/// Mean squared error, a scalar.
template <class T>
qkv::Variable<T> mse(const qkv::Variable<T>& y, const qkv::Variable<T>& target) {
  qkv::Variable<T> d = y - target;
  return qkv::mean(d * d);
}

/// The toy objective: a student GatedAttention learns to imitate a teacher (same shape, other
/// initialisation) on random inputs x (B=16, T=8, E=16, 2 heads), with Adam. Returns the loss on
/// a fixed held-out batch before training and after each step (steps + 1 values).
template <class T>
std::vector<double> train_student(int steps, double lr = 1e-2) {
  const std::size_t B = 16, T_ = 8, E = 16, H = 2;
  qkv::Generator teacher_init(11), student_init(12), data(13), held_out(14);
  GatedAttention<T> teacher(E, H, teacher_init);
  GatedAttention<T> student(E, H, student_init);
  qkv::optim::AdamOptions adam;
  adam.lr = lr;
  qkv::optim::Adam<T> opt(student.named_parameters(), adam);

  qkv::Variable<T> x_eval(randn<T>({B, T_, E}, held_out));
  qkv::Variable<T> y_eval;
  {
    qkv::NoGradGuard no_grad;
    y_eval = teacher.forward(x_eval).detach();
  }
  auto eval_loss = [&] {
    qkv::NoGradGuard no_grad;
    return double(mse(student.forward(x_eval), y_eval).item());
  };

  std::vector<double> losses{eval_loss()};
  for (int step = 1; step <= steps; ++step) {
    qkv::Variable<T> x(randn<T>({B, T_, E}, data));
    qkv::Variable<T> target;
    {
      qkv::NoGradGuard no_grad;
      target = teacher.forward(x).detach();
    }
    qkv::Variable<T> loss = mse(student.forward(x), target);
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(eval_loss());
  }
  return losses;
}

}  // namespace consumer
