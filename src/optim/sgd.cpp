#include "qkv/optim/sgd.hpp"

#include <cmath>

#include "for_ranges.hpp"

namespace qkv::optim {
namespace {

void check(const SGDOptions& o) {
  auto bad = [](const std::string& what, double v) {
    throw ValueError("SGD: option " + what + ", got " + std::to_string(v));
  };
  if (!(o.lr >= 0)) bad("lr must be >= 0", o.lr);
  if (!(o.momentum >= 0)) bad("momentum must be >= 0", o.momentum);
  if (!std::isfinite(o.dampening)) bad("dampening must be finite", o.dampening);
  if (!(o.weight_decay >= 0)) bad("weight_decay must be >= 0", o.weight_decay);
  if (o.nesterov && !(o.momentum > 0 && o.dampening == 0))
    throw ValueError("SGD: option nesterov needs momentum > 0 and dampening == 0, got momentum " +
                     std::to_string(o.momentum) + " and dampening " + std::to_string(o.dampening));
}

}  // namespace

template <class T>
SGD<T>::SGD(std::vector<ParamGroup<T>> groups, SGDOptions options)
    : Optimizer<T>(std::move(groups), "SGD"), options_(options) {
  check(options_);
  if (options_.momentum != 0) momentum_ = this->add_buffer("momentum_buffer");
}

template <class T>
SGD<T>::SGD(const std::vector<std::pair<std::string, Variable<T>>>& named, SGDOptions options)
    : SGD(one_group(named, options.lr, options.weight_decay), options) {}

namespace {

// One SGD update of w[lo, hi) (and its momentum buffer). Every operand is a local here: read
// through a closure, the scalars were reloaded after each store to w and the loop ran scalar.
template <class T>
void sgd_range(T* w, const T* grad, T* buf, std::size_t lo, std::size_t hi, T lr, T wd, bool decay,
               bool use_momentum, bool first, T momentum, T keep, bool nesterov) {
#pragma omp simd
  for (std::size_t i = lo; i < hi; ++i) {
    T d = decay ? grad[i] + wd * w[i] : grad[i];
    if (use_momentum) {
      buf[i] = first ? d : buf[i] * momentum + keep * d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  }
}

}  // namespace

template <class T>
void SGD<T>::step() {
  ++this->step_;
  const bool first = this->step_ == 1;  // torch starts the momentum buffer at the gradient
  const T momentum = T(options_.momentum);
  const T keep = T(1 - options_.dampening);
  const bool nesterov = options_.nesterov;
  const bool use_momentum = options_.momentum != 0;
  this->for_each_with_grad([&](const ParamGroup<T>& g, std::size_t index, const Variable<T>& p) {
    const T lr = T(g.lr * g.gain * g.gain), wd = T(g.weight_decay / (g.gain * g.gain));  // ParamGroup::gain
    const bool decay = g.weight_decay != 0;
    T* w = p.data();
    const T* grad = p.grad().data();
    T* buf = use_momentum ? this->buffer(momentum_, index).data() : nullptr;
    detail::for_ranges(p.size(), [&](std::size_t lo, std::size_t hi) {
      sgd_range(w, grad, buf, lo, hi, lr, wd, decay, use_momentum, first, momentum, keep, nesterov);
    });
  });
}

template class SGD<float>;
template class SGD<double>;

}  // namespace qkv::optim
