#include "qkv/ops/dropout.hpp"
#include "qkv/kernels/dropout.hpp"

#include <sstream>

namespace qkv {
namespace {

void check_p(double p, const char* op) {
  if (p >= 0.0 && p < 1.0) return;
  std::ostringstream msg;
  msg << op << ": probability p must be in [0, 1), got " << p;
  throw ValueError(msg.str());
}

// What a dropout op keeps for its backward: the mask's draws (recomputed from the counter rather
// than stored: half a 32-bit hash per element costs less than reading a stored mask) and 1/(1-p).
struct Draws {
  DropoutDraws draws;
  std::uint64_t first;
  double scale;
  Draws(std::size_t n, double p, Generator& gen)
      : draws(gen.seed(), p), first(gen.reserve(n, DropoutDraws::kBlock)), scale(1.0 / (1.0 - p)) {}
  template <class T>
  Array<T> masked(const Array<T>& g) const {  // g * mask / (1 - p)
    Array<T> out = Array<T>::from_shape(g.shape());
    kernels::dropout_forward(draws, first, T(scale), g.data(), out.data(), g.size());
    return out;
  }
};

}  // namespace

template <class T>
Variable<T> dropout(const Variable<T>& x, double p, bool training, Generator& gen) {
  check_p(p, "dropout");
  if (!training || p == 0.0) return x;
  const Draws d(x.size(), p, gen);
  return record_op<T>("dropout", d.masked(x.value()), needs_grad(x), [x = x.without_value(), d](const Array<T>& gy) {
    // y = x * mask / (1 - p), so dx = dy * mask / (1 - p), with the same mask.
    x.accumulate_grad(d.masked(gy), "dropout");
  });
}

template <class T>
Variable<T> dropout_add(const Variable<T>& x, const Variable<T>& y, double p, bool training, Generator& gen) {
  check_p(p, "dropout_add");
  if (x.shape() != y.shape())
    throw ShapeError("dropout_add: x of shape " + shape_str(x.shape()) + " and y of shape " + shape_str(y.shape()) +
                     " differ (expected the same shape)");
  if (!training || p == 0.0) return add(x, y);
  const Draws d(y.size(), p, gen);
  Array<T> out = Array<T>::from_shape(y.shape());
  kernels::dropout_add_forward(d.draws, d.first, T(d.scale), x.data(), y.data(), out.data(), y.size());
  return record_op<T>("dropout_add", std::move(out), needs_grad(x, y),
                      [x = x.without_value(), y = y.without_value(), d](const Array<T>& g) {
    // out = x + y * mask / (1 - p): dx = g, dy = g * mask / (1 - p).
    x.accumulate_grad(g, "dropout_add");
    if (y.requires_grad()) y.accumulate_grad(d.masked(g), "dropout_add");
  });
}

template <class T>
Variable<T> gelu_dropout(const Variable<T>& x, GeluApprox approx, double p, bool training, Generator& gen) {
  check_p(p, "gelu_dropout");
  if (!training || p == 0.0) return gelu(x, approx);
  const bool tanh = approx == GeluApprox::Tanh;
  const Draws d(x.size(), p, gen);
  Array<T> out = Array<T>::from_shape(x.shape());
  kernels::gelu_dropout_forward(d.draws, d.first, T(d.scale), x.data(), out.data(), x.size(), tanh);
  return record_op<T>("gelu_dropout", std::move(out), needs_grad(x), [x, d, tanh](const Array<T>& g) {
    Array<T> gx = Array<T>::from_shape(x.shape());
    kernels::gelu_dropout_backward(d.draws, d.first, T(d.scale), g.data(), x.data(), gx.data(), x.size(), tanh);
    x.accumulate_grad(std::move(gx), "gelu_dropout");
  });
}

#define QKV_INSTANTIATE(T)                                                                              \
  template Variable<T> dropout(const Variable<T>&, double, bool, Generator&);                         \
  template Variable<T> dropout_add(const Variable<T>&, const Variable<T>&, double, bool, Generator&); \
  template Variable<T> gelu_dropout(const Variable<T>&, GeluApprox, double, bool, Generator&);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv
