#pragma once
/// @file
/// Inverted dropout.

#include "qkv/autograd/variable.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv {

/// In training: each element is zeroed with probability p, survivors scaled by 1/(1-p). Element i
/// is dropped when DropoutDraws(gen.seed(), p).dropped(first + i), with first =
/// gen.reserve(x.size(), DropoutDraws::kBlock); so the mask depends only on the generator state,
/// never on threads. Not training, or p == 0: identity (no draw is reserved). p must be in
/// [0, 1) (ValueError).
template <class T>
Variable<T> dropout(const Variable<T>& x, double p, bool training, Generator& gen = default_generator());

/// x + dropout(y, p, training, gen), x and y of the same shape (ShapeError): the residual add
/// after a dropped branch, in one pass over memory, with no dropped copy of y stored. Bit for
/// bit what add(x, dropout(y, ...)) gives, values and gradients, and the same draws.
template <class T>
Variable<T> dropout_add(const Variable<T>& x, const Variable<T>& y, double p, bool training,
                        Generator& gen = default_generator());

/// dropout(gelu(x, approx), p, training, gen) in one pass over memory (forward and backward), with
/// no undropped copy stored: the feed-forward hidden layer. Bit for bit what the two ops give.
template <class T>
Variable<T> gelu_dropout(const Variable<T>& x, GeluApprox approx, double p, bool training,
                         Generator& gen = default_generator());

}  // namespace qkv
