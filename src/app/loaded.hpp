#pragma once
// What the commands that read a trained model share: exit-status mapping, loading a checkpoint
// into a model, and the one input an instrument looks at (--text or --example).

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/io/io_error.hpp"
#include "qkv/model/load.hpp"
#include "qkv/io/files.hpp"

namespace qkv::app {

/// Run a command, mapping exceptions to exit statuses: config and argument errors 2, others 1.
template <class F>
int guarded(F&& body) {
  try {
    return body();
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 2;
  } catch (const io::IoError& e) {
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 1;
  } catch (const ValueError& e) {
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  }
}

/// A trained model rebuilt from a checkpoint (model::LoadedModel).
using Loaded = model::LoadedModel;

/// Load `path` after checking it is a readable regular file and probing it (see probe.hpp).
/// `overrides`: task.* keys only. Without `with_data` a text model does not read its corpus.
Loaded load(const std::string& path, const std::vector<std::string>& overrides, bool with_data = true);

/// The checkpoint loaded with what `in` needs (no corpus for --text).
Loaded load_for(const std::string& path, const InputChoice& in);
/// One row: the tokens of --text (targets: the next tokens within the text for next-token tasks,
/// else unscored), or held-out example N. ValueError for text with characters outside the
/// vocabulary, empty text, text longer than the model's context, a non-text model given text
/// without --ids, an encoder-decoder model given text, or an example index past the set.
data::Batch input_batch(const Loaded& l, const InputChoice& in);
/// "12.34%", or "-" for a metric not measured yet (negative or NaN).
std::string percent(double x);

/// "held-out example 3" or "text 'abc'", for titles.
std::string describe_input(const InputChoice& in);

}  // namespace qkv::app
