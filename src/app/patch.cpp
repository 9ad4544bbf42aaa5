// qkv patch: activation patching of every head (interp/patching.hpp, docs/instruments.md).
#include <cstdio>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::app {

int patch(const PatchArgs& a) {
  return guarded_with({{"clean.", "--clean"}, {"corrupt.", "--corrupt"}}, [&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load(a.checkpoint, {}, false);  // typed inputs only: a text model's corpus is not read
    interp::PatchRequest r;
    for (auto [text, input] : {std::pair{&a.clean, &r.clean}, {&a.corrupt, &r.corrupt}}) {
      InputChoice in;
      in.has_text = true, in.text = *text, in.ids = a.ids, in.mask_text = a.mask_text;
      *input = input_request(in, &l);
    }
    if (a.has_position) r.position = a.position;
    if (!a.answer.empty()) r.answer = a.answer;
    if (!a.wrong.empty()) r.wrong = a.wrong;
    r.ids = a.ids;
    r.point = a.point;
    const interp::PatchingResult result = interp::patch(l, r);
    if (a.json) {
      std::printf("%s", interp::patching_json(result, *l.task).c_str());
      return 0;
    }
    const char* kind = a.ids ? "tokens" : "text";
    std::printf("%s: activation patching, %zu tokens\n  clean    %s '%s'\n  corrupt  %s '%s'\n%s", a.checkpoint.c_str(),
                result.clean_tokens.size(),
                kind, a.clean.c_str(), kind, a.corrupt.c_str(), interp::format_patching(result, *l.task).c_str());
    return 0;
  });
}

}  // namespace qkv::app
