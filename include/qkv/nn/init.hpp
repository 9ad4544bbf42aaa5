#pragma once
/// @file
/// Parameter initialisers. Each returns a fresh array of the given shape, drawn from `gen` (so a
/// model built from a seeded Generator is the same on every run and thread count).
///
/// Fans follow PyTorch's _calculate_fan_in_and_fan_out: for a weight (out, in, k...) fan_in =
/// in * prod(k), fan_out = out * prod(k); a 1-D shape (n) has fan_in = fan_out = n.

#include <cstddef>
#include <utility>

#include "qkv/tensor/random.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::nn::init {

/// (fan_in, fan_out) of a weight shape, as described in the file comment. Throws ValueError for a
/// scalar shape.
std::pair<std::size_t, std::size_t> fans(const Shape& shape);

/// U(lo, hi) elementwise.
template <class T>
Array<T> uniform(const Shape& shape, double lo, double hi, Generator& gen = default_generator());

/// N(mean, std^2) elementwise (Box-Muller draws of Generator::normal).
template <class T>
Array<T> normal(const Shape& shape, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());

/// Glorot/Xavier uniform: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
template <class T>
Array<T> xavier_uniform(const Shape& shape, double gain = 1.0, Generator& gen = default_generator());

/// He/Kaiming uniform for a leaky-ReLU slope `a`: U(-b, b) with b = gain * sqrt(3 / fan_in) and
/// gain = sqrt(2 / (1 + a^2)). With a = sqrt(5) (PyTorch's nn.Linear default) b = 1 / sqrt(fan_in).
template <class T>
Array<T> kaiming_uniform(const Shape& shape, double a = 0.0, Generator& gen = default_generator());

/// PyTorch's nn.Linear default weight: kaiming_uniform(shape, a = sqrt(5)), i.e.
/// U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
template <class T>
Array<T> linear_default(const Shape& shape, Generator& gen = default_generator());

}  // namespace qkv::nn::init
