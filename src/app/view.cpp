// qkv view: a self-contained HTML page of every attention head on one input (docs/viewer.md).
#include "commands.hpp"
#include "loaded.hpp"

namespace qkv::app {

int view(const ViewArgs& a) {
  return guarded([&]() -> int { throw ValueError("qkv view: not written yet (" + a.out + ")"); });
}

}  // namespace qkv::app
