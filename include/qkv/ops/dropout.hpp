#pragma once
/// @file
/// Inverted dropout.

#include "qkv/autograd/variable.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv {

/// In training: each element is zeroed with probability p, survivors scaled by 1/(1-p). Element i
/// is dropped when DropoutDraws(gen.seed(), p).dropped(first + i), with first =
/// gen.reserve(x.size(), DropoutDraws::kBlock); so the mask depends only on the generator state, never on threads. Not training, or p == 0: identity
/// (no draw is reserved). p must be in [0, 1).
template <class T>
Variable<T> dropout(const Variable<T>& x, double p, bool training, Generator& gen = default_generator());

}  // namespace qkv
