// qkv patch: activation patching of every head (interp/patching.hpp, docs/instruments.md).
#include <cstdio>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/tensor/parallel.hpp"
#include "serve_api.hpp"

namespace qkv::app {

int patch(const PatchArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load(a.checkpoint, {}, false);  // typed inputs only: a text model's corpus is not read
    const data::Task& task = *l.task;
    auto row = [&](const std::string& text, const std::string& what) {
      return a.ids ? data::ids_row(task, model::parse_ids(text, task.input_vocab(), what), what)
                   : task.text_row(text, what, a.mask_text);
    };
    const data::Batch clean = row(a.clean, "--clean"), corrupt = row(a.corrupt, "--corrupt");
    interp::PatchingOptions o;
    if (a.has_position) o.position = a.position;
    if (!a.answer.empty()) o.answer = token_class(task, task.num_classes(), a.answer, a.ids, "--answer");
    if (!a.wrong.empty()) o.wrong = token_class(task, task.num_classes(), a.wrong, a.ids, "--wrong");
    const interp::PatchingResult r = interp::patch_heads(*l.model, task, clean, corrupt, o);
    if (a.json) {
      std::printf("%s", interp::patching_json(r, task).c_str());
      return 0;
    }
    const char* kind = a.ids ? "tokens" : "text";
    std::printf("%s: activation patching, %zu tokens\n  clean    %s '%s'\n  corrupt  %s '%s'\n%s", a.checkpoint.c_str(),
                std::size_t(clean.inputs.shape()[1]), kind, a.clean.c_str(), kind, a.corrupt.c_str(),
                interp::format_patching(r, task).c_str());
    return 0;
  });
}

}  // namespace qkv::app
