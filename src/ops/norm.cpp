#include "qkv/ops/norm.hpp"

#include <sstream>

#include "qkv/kernels/layer_norm.hpp"

namespace qkv {

template <class T>
Variable<T> layer_norm(const Variable<T>& x, const Variable<T>& gamma, const Variable<T>& beta, double eps) {
  const Shape& sx = x.shape();
  if (sx.empty())
    throw ShapeError("layer_norm: input of shape () has no last dimension to normalise");
  const std::size_t C = sx.back(), rows = C ? x.size() / C : 0;
  for (const auto& [p, name] : {std::pair{&gamma, "gamma"}, std::pair{&beta, "beta"}})
    if (p->defined() && p->shape() != Shape{C})
      throw ShapeError(std::string("layer_norm: ") + name + " of shape " + shape_str(p->shape()) +
                       " does not fit input of shape " + shape_str(sx) + " (expected (" + std::to_string(C) + "))");
  if (!(eps >= 0)) {
    std::ostringstream msg;
    msg << "layer_norm: eps must be >= 0, got " << eps;
    throw ValueError(msg.str());
  }

  const T* g = gamma.defined() ? gamma.data() : nullptr;
  const T* b = beta.defined() ? beta.data() : nullptr;
  Array<T> y = Array<T>::from_shape(sx);
  Array<T> mean = Array<T>::from_shape({rows}), rstd = Array<T>::from_shape({rows});
  kernels::layer_norm_forward<T>(y.data(), mean.data(), rstd.data(), x.data(), g, b, rows, C, T(eps));

  auto wants = [](const Variable<T>& v) { return v.defined() && v.requires_grad(); };
  const bool grad = autograd::grad_enabled() && (wants(x) || wants(gamma) || wants(beta));
  return record_op<T>("layer_norm", std::move(y), grad,
                      [x, gamma, beta, mean = std::move(mean), rstd = std::move(rstd), rows, C, wants](const Array<T>& gy) {
    Array<T> gx, ggamma, gbeta;
    if (wants(x)) gx = Array<T>::from_shape(x.shape());
    if (wants(gamma)) ggamma = Array<T>::from_shape({C});
    if (wants(beta)) gbeta = Array<T>::from_shape({C});
    kernels::layer_norm_backward<T>(wants(x) ? gx.data() : nullptr, wants(gamma) ? ggamma.data() : nullptr,
                                    wants(beta) ? gbeta.data() : nullptr, gy.data(), x.data(), mean.data(),
                                    rstd.data(), gamma.defined() ? gamma.data() : nullptr, rows, C);
    if (wants(x)) x.accumulate_grad(std::move(gx), "layer_norm");
    if (wants(gamma)) gamma.accumulate_grad(std::move(ggamma), "layer_norm");
    if (wants(beta)) beta.accumulate_grad(std::move(gbeta), "layer_norm");
  });
}

template Variable<float> layer_norm(const Variable<float>&, const Variable<float>&, const Variable<float>&, double);
template Variable<double> layer_norm(const Variable<double>&, const Variable<double>&, const Variable<double>&, double);

}  // namespace qkv
