#pragma once
// What the commands that read a trained model share: exit statuses, loading a checkpoint (probed
// first in a child process), the one input an instrument reads (--text, --ids, --example), and how
// the command line spells a request's fields in error messages.

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "qkv/config/config.hpp"
#include "qkv/io/io_error.hpp"
#include "qkv/model/input.hpp"
#include "qkv/model/load.hpp"

namespace qkv::app {

/// Field-to-flag renames for one command (a field "clean." with a trailing dot renames every
/// field below it); the rest are "--" + the field's last part with '_' written '-' ("top_k" ->
/// "--top-k", "input.example" -> "--example", "options.sampling.top_p" -> "--top-p").
using FlagNames = std::vector<std::pair<std::string, std::string>>;
/// The flag that spells `field` (FlagNames).
std::string flag_name(const std::string& field, const FlagNames& renames = {});

/// Run a command, mapping exceptions to exit statuses: config and argument errors 2, others 1. A
/// request's field error is printed with the field spelt as its flag.
int guarded_with(const FlagNames& flags, const std::function<int()>& body);
template <class F>
int guarded(F&& body) {
  return guarded_with({}, std::forward<F>(body));
}

/// A trained model rebuilt from a checkpoint (model::LoadedModel).
using Loaded = model::LoadedModel;

/// Load `path` after checking it is a readable regular file and probing it (see probe.hpp), within
/// this machine's memory. `overrides`: task.* keys only. Without `with_data` a text model does not
/// read its corpus.
Loaded load(const std::string& path, const std::vector<std::string>& overrides, bool with_data = true);
/// Load `path` with its data when it can be had, else without it, with `data_note` saying why
/// ("which could not be loaded (...)": a text model whose corpus is not on this machine still
/// reads typed text). A config error is thrown.
Loaded load_with_data(const std::string& path, std::string& data_note);

/// The request of --text / --ids / --example, and the checkpoint loaded with what it needs (no
/// corpus for text).
model::InputRequest input_request(const InputChoice& in, const Loaded* l = nullptr);
Loaded load_for(const std::string& path, const InputChoice& in);

/// "12.34%", or "-" for a metric not measured yet (negative or NaN).
std::string percent(double x);

/// Print `json` (one document) and a newline.
void print_json(const std::string& json);

}  // namespace qkv::app
