#pragma once
// Internal to src/data: the factory of the next-token and one-label tasks (next_token.cpp).

#include <memory>

#include "qkv/data/tasks.hpp"

namespace qkv::data {

/// text, induction, mod_add, mqar; nullptr for any other name.
std::unique_ptr<Task> make_next_token_task(const TaskOptions& options, const Tokenizer* tokenizer);

}  // namespace qkv::data
