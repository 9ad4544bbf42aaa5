#pragma once
/// @file
/// The error of files: one that cannot be written or read, or whose contents are not what qkv
/// expects (the message names the file and the object).

#include "qkv/tensor/tensor.hpp"

namespace qkv::io {

struct IoError : Error {
  using Error::Error;
};

}  // namespace qkv::io
