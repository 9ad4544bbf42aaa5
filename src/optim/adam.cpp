#include "qkv/optim/adam.hpp"

#include <cmath>

#include "for_ranges.hpp"

namespace qkv::optim {
namespace {

void check(const AdamOptions& o, const char* name) {
  auto bad = [&](const std::string& what, double v) {
    throw ValueError(std::string(name) + ": option " + what + ", got " + std::to_string(v));
  };
  if (!(o.lr >= 0)) bad("lr must be >= 0", o.lr);
  if (!(o.beta1 >= 0 && o.beta1 < 1)) bad("beta1 must be in [0, 1)", o.beta1);
  if (!(o.beta2 >= 0 && o.beta2 < 1)) bad("beta2 must be in [0, 1)", o.beta2);
  if (!(o.eps >= 0)) bad("eps must be >= 0", o.eps);
  if (!(o.weight_decay >= 0)) bad("weight_decay must be >= 0", o.weight_decay);
}

// Step-wide scalars, in double as torch computes them in Python.
struct Scalars {
  double beta1, beta2, eps, bias1, bias2_sqrt;
};
Scalars scalars(const AdamOptions& o, std::int64_t step) {
  return {o.beta1, o.beta2, o.eps, 1 - std::pow(o.beta1, double(step)), std::sqrt(1 - std::pow(o.beta2, double(step)))};
}

// The update's coefficients in T, each rounded from double once per step.
template <class T>
struct Coefs {
  T beta1, beta2, one_minus_beta1, one_minus_beta2, eps, bias2_sqrt, step_size, l2, shrink;
  bool decay, decoupled;
};

// One Adam (decoupled = false) or AdamW (decoupled = true) update of w[lo, hi) with its
// gradient and moments. Every operand is a local here: read through a closure, the coefficients
// were reloaded after each store to w and the loop ran scalar (1.4% of the small model's step).
template <class T>
void update_range(T* w, const T* grad, T* m, T* v, std::size_t lo, std::size_t hi, const Coefs<T>& c) {
  const T beta1 = c.beta1, beta2 = c.beta2, one_minus_beta1 = c.one_minus_beta1,
          one_minus_beta2 = c.one_minus_beta2, eps = c.eps, bias2_sqrt = c.bias2_sqrt,
          step_size = c.step_size, l2 = c.l2, shrink = c.shrink;
  const bool decay = c.decay, decoupled = c.decoupled;
#pragma omp simd
  for (std::size_t i = lo; i < hi; ++i) {
    T gi = grad[i];
    if (decay) {
      if (decoupled)
        w[i] *= shrink;
      else
        gi += l2 * w[i];
    }
    m[i] = m[i] * beta1 + one_minus_beta1 * gi;
    v[i] = v[i] * beta2 + one_minus_beta2 * gi * gi;
    const T denom = std::sqrt(v[i]) / bias2_sqrt + eps;
    w[i] -= step_size * (m[i] / denom);
  }
}

// One Adam or AdamW update of parameter p in group g.
template <class T>
void update(const Variable<T>& p, Array<T>& exp_avg, Array<T>& exp_avg_sq, const ParamGroup<T>& g,
            const Scalars& s, bool decoupled) {
  // ParamGroup::gain: W = gain * theta, so W's gradient and moments are theta's over gain.
  const double gain = g.gain;
  const Coefs<T> c{T(s.beta1), T(s.beta2), T(1 - s.beta1), T(1 - s.beta2), T(s.eps / gain), T(s.bias2_sqrt),
                   T(g.lr * gain / s.bias1), T(g.weight_decay / (gain * gain)), T(1 - g.lr * g.weight_decay),
                   g.weight_decay != 0, decoupled};
  T* w = p.data();
  const T* grad = p.grad().data();
  T* m = exp_avg.data();
  T* v = exp_avg_sq.data();
  detail::for_ranges(p.size(), [&](std::size_t lo, std::size_t hi) { update_range(w, grad, m, v, lo, hi, c); });
}

}  // namespace

template <class T>
Adam<T>::Adam(std::vector<ParamGroup<T>> groups, AdamOptions options, const char* name, bool decoupled)
    : Optimizer<T>(std::move(groups), name), options_(options), decoupled_(decoupled) {
  check(options_, name);
  exp_avg_ = this->add_buffer("exp_avg");
  exp_avg_sq_ = this->add_buffer("exp_avg_sq");
}

template <class T>
void Adam<T>::step() {
  ++this->step_;
  const Scalars s = scalars(options_, this->step_);
  this->for_each_with_grad([&](const ParamGroup<T>& g, std::size_t k, const Variable<T>& p) {
    update(p, this->buffer(exp_avg_, k), this->buffer(exp_avg_sq_, k), g, s, decoupled_);
  });
}

template class Adam<float>;
template class Adam<double>;
template class AdamW<float>;
template class AdamW<double>;

}  // namespace qkv::optim
