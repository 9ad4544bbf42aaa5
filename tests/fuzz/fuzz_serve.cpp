// libFuzzer target: the studio's request handler (app::Studio::handle, src/app/serve_api.hpp) on
// arbitrary requests (layout and contract in serve_target.hpp).
#include "serve_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static qkv::app::Studio studio = qkv::fuzz::make_studio();
  qkv::fuzz::run_serve_input(studio, data, size);
  return 0;
}
