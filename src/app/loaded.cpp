#include "loaded.hpp"

#include <cstring>

#include "probe.hpp"
#include "qkv/io/files.hpp"

namespace qkv::app {

std::string flag_name(const std::string& field, const FlagNames& renames) {
  std::string f = renamed_field(field, renames);
  if (f != field) return f.substr(0, f.find('['));
  f = f.substr(0, f.find('['));  // "ids[3]": the flag holds them all
  for (const char* prefix : {"input.", "options.sampling.", "options."})
    if (f.rfind(prefix, 0) == 0) f = f.substr(std::strlen(prefix));
  if (f == "ids") return "--text";  // --ids makes --text a list of token ids
  for (char& c : f)
    if (c == '_') c = '-';
  return "--" + f;
}

int guarded_with(const FlagNames& flags, const std::function<int()>& body) {
  try {
    return body();
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 2;
  } catch (const io::IoError& e) {
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 1;
  } catch (const OptionError& e) {
    if (e.owner != "request") {
      std::fprintf(stderr, "qkv: %s\n", e.what());
      return 2;
    }
    auto name = [&](const std::string& f) { return flag_name(f, flags); };
    std::fprintf(stderr, "qkv: %s\n", e.report(name).c_str());
    return 2;
  } catch (const ValueError& e) {
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  }
}

Loaded load(const std::string& path, const std::vector<std::string>& overrides, bool with_data) {
  io::check_input_file(path, "checkpoint");
  probe_checkpoint(path);
  return model::load_model(path, model::LoadOptions{overrides, with_data, io::physical_memory_bytes()});
}

Loaded load_with_data(const std::string& path, std::string& data_note) {
  try {
    data_note.clear();
    return load(path, {}, true);
  } catch (const config::ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    data_note = std::string("which could not be loaded (") + e.what() + ")";
    return load(path, {}, false);
  }
}

model::InputRequest input_request(const InputChoice& in, const Loaded* l) {
  model::InputRequest r;
  r.mask_text = in.mask_text;
  if (!in.has_text) {
    r.example = in.example;
  } else if (in.ids) {
    as_field("ids", [&] { r.ids = model::parse_ids(in.text, l ? l->task->input_vocab() : std::size_t(-1), "ids"); });
  } else {
    r.text = in.text;
  }
  return r;
}

Loaded load_for(const std::string& path, const InputChoice& in) { return load(path, {}, !in.has_text); }

std::string percent(double x) {
  if (!(x >= 0)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", 100 * x);
  return b;
}

void print_json(const std::string& json) { std::printf("%s\n", json.c_str()); }

}  // namespace qkv::app
