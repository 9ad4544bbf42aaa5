#pragma once
/// @file
/// Umbrella header: everything qkv offers.

#include "qkv/autograd/gradcheck.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/autograd/variable.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/parallel.hpp"
#include "qkv/ops/attention.hpp"
#include "qkv/ops/dropout.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/embedding.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/norm.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/ops/shape.hpp"
#include "qkv/ops/softmax.hpp"
#include "qkv/tensor/random.hpp"
#include "qkv/tensor/tensor.hpp"
