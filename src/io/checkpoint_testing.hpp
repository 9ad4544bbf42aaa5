#pragma once
// Test hook of save_checkpoint, for tests/io only (not a public header).

#include <functional>
#include <string>

namespace qkv::io::testing {
/// Called by save_checkpoint at its stages ("written": all objects written, file still open;
/// "renaming": temp file closed and synced, just before rename). Throwing from it simulates a
/// failure at that point. Pass nullptr to remove.
void set_save_hook(std::function<void(const std::string& stage)> hook);
}  // namespace qkv::io::testing
