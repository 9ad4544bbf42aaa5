#include "qkv/nn/positional.hpp"

#include <cmath>

#include "qkv/nn/init.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/shape.hpp"

namespace qkv::nn {

void PositionalOptions::validate() const {
  OptionChecker c("PositionalOptions");
  c.positive(max_len, "max_len"); c.positive(dim, "dim");
  c.in_range(init_std, "init_std", 0, false, INFINITY, true);
}

namespace {

// x must be (B, T, C) with C = dim and offset + T <= max_len; returns T.
template <class T>
std::size_t check_input(const Variable<T>& x, std::size_t offset, const PositionalOptions& o, const char* who) {
  if (x.ndim() != 3 || x.dim(2) != o.dim)
    throw ShapeError(std::string(who) + ": expected input (B, T, " + std::to_string(o.dim) + "), found " +
                     shape_str(x.shape()));
  if (offset + x.dim(1) > o.max_len)
    throw ShapeError(std::string(who) + ": sequence length " + std::to_string(offset + x.dim(1)) + " exceeds max_len " +
                     std::to_string(o.max_len));
  return x.dim(1);
}

}  // namespace

template <class T>
LearnedPositionalEncoding<T>::LearnedPositionalEncoding(const PositionalOptions& options, Generator& gen)
    : options_(options) {
  options.validate();
  const Shape shape{options.max_len, options.dim};
  weight = this->register_parameter("weight", shape, [&] { return init::normal<T>(shape, 0.0, options.init_std, gen); });
}

template <class T>
Variable<T> LearnedPositionalEncoding<T>::forward(const Variable<T>& x, std::size_t offset) const {
  const std::size_t len = check_input(x, offset, options_, "LearnedPositionalEncoding");
  // (T, C) broadcasts over the batch.
  return this->hooked(add(x, slice(weight, 0, offset, offset + len)));
}

template <class T>
SinusoidalPositionalEncoding<T>::SinusoidalPositionalEncoding(const PositionalOptions& options)
    : options_(options) {
  options.validate();
  if (MetaGuard::active()) return;  // a constant table, not a parameter: nothing to size
  const std::size_t C = options.dim;
  table_ = Array<T>::from_shape({options.max_len, C});
  for (std::size_t t = 0; t < options.max_len; ++t)
    for (std::size_t j = 0; j < C; ++j) {
      // Column pair (2i, 2i+1) shares the frequency 10000^(-2i/C).
      const double angle = double(t) * std::pow(10000.0, -double(j - j % 2) / double(C));
      table_(t, j) = static_cast<T>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
}

template <class T>
Variable<T> SinusoidalPositionalEncoding<T>::forward(const Variable<T>& x, std::size_t offset) const {
  const std::size_t len = check_input(x, offset, options_, "SinusoidalPositionalEncoding");
  const std::size_t C = options_.dim;
  Array<T> pe = Array<T>::from_shape({len, C});
  std::copy(table_.data() + offset * C, table_.data() + (offset + len) * C, pe.data());
  return this->hooked(add(x, Variable<T>(std::move(pe))));
}

template class LearnedPositionalEncoding<float>;
template class LearnedPositionalEncoding<double>;
template class SinusoidalPositionalEncoding<float>;
template class SinusoidalPositionalEncoding<double>;

}  // namespace qkv::nn
