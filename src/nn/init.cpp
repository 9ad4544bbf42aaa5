#include "qkv/nn/init.hpp"

#include <cmath>

namespace qkv::nn::init {

std::pair<std::size_t, std::size_t> fans(const Shape& shape) {
  if (shape.empty()) throw ValueError("init: fan_in/fan_out need at least 1 dimension, found shape ()");
  if (shape.size() == 1) return {shape[0], shape[0]};
  std::size_t receptive = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) receptive *= shape[d];
  return {shape[1] * receptive, shape[0] * receptive};
}

template <class T>
Array<T> uniform(const Shape& shape, double lo, double hi, Generator& gen) {
  Array<T> a = Array<T>::from_shape(shape);
  for (auto& v : a) v = static_cast<T>(gen.uniform(lo, hi));
  return a;
}

template <class T>
Array<T> normal(const Shape& shape, double mean, double std, Generator& gen) {
  Array<T> a = Array<T>::from_shape(shape);
  for (auto& v : a) v = static_cast<T>(mean + std * gen.normal());
  return a;
}

template <class T>
Array<T> xavier_uniform(const Shape& shape, double gain, Generator& gen) {
  auto [fan_in, fan_out] = fans(shape);
  const double b = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  return uniform<T>(shape, -b, b, gen);
}

template <class T>
Array<T> kaiming_uniform(const Shape& shape, double a, Generator& gen) {
  const double fan_in = double(fans(shape).first);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double b = gain * std::sqrt(3.0 / fan_in);
  return uniform<T>(shape, -b, b, gen);
}

template <class T>
Array<T> linear_default(const Shape& shape, Generator& gen) {
  return kaiming_uniform<T>(shape, std::sqrt(5.0), gen);
}

#define QKV_INSTANTIATE(T)                                                          \
  template Array<T> uniform<T>(const Shape&, double, double, Generator&);           \
  template Array<T> normal<T>(const Shape&, double, double, Generator&);            \
  template Array<T> xavier_uniform<T>(const Shape&, double, Generator&);            \
  template Array<T> kaiming_uniform<T>(const Shape&, double, Generator&);           \
  template Array<T> linear_default<T>(const Shape&, Generator&);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv::nn::init
