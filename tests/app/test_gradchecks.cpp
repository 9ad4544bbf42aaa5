#include <doctest/doctest.h>

#include "app/gradchecks.hpp"

TEST_CASE("qkv gradcheck: every layer and model passes its float64 gradient check") {
  auto results = qkv::app::run_layer_gradchecks();
  CHECK(results.size() >= 19);
  for (auto& r : results) {
    INFO(r.name << ": worst error " << r.worst_error << " (" << r.worst_ratio << " of tolerance)");
    CHECK(r.ok);
    CHECK(r.worst_ratio <= 1.0);
  }
}
