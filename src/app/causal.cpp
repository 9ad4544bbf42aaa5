// The two-run instruments and the lens: qkv patch (interp/patching.hpp), qkv attribute
// (interp/attribution.hpp), qkv path (interp/path_patching.hpp) and qkv lens (interp/lens.hpp);
// docs/instruments.md.
#include <cstdio>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/interp/attribution.hpp"
#include "qkv/interp/lens.hpp"
#include "qkv/interp/path_patching.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::app {
namespace {

// The clean and corrupted inputs, the position and the tokens: the fields every two-run request has.
template <class Request>
void two_runs(const PatchArgs& a, Loaded& l, Request& r) {
  for (auto [text, input] : {std::pair{&a.clean, &r.clean}, {&a.corrupt, &r.corrupt}}) {
    InputChoice in;
    in.has_text = true, in.text = *text, in.ids = a.ids, in.mask_text = a.mask_text;
    *input = input_request(in, &l);
  }
  if (a.has_position) r.position = a.position;
  if (!a.answer.empty()) r.answer = a.answer;
  if (!a.wrong.empty()) r.wrong = a.wrong;
  r.ids = a.ids;
}

// Loads the checkpoint for typed inputs (a text model's corpus is not read), runs `body` with
// --clean and --corrupt named in field errors.
template <class F>
int with_two_runs(const PatchArgs& a, F&& body) {
  return guarded_with({{"clean.", "--clean"}, {"corrupt.", "--corrupt"}, {"receivers", "--receivers"}}, [&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load(a.checkpoint, {}, false);
    return body(l);
  });
}

void print_header(const PatchArgs& a, const std::string& what) {
  const char* kind = a.ids ? "tokens" : "text";
  std::printf("%s: %s\n  clean    %s '%s'\n  corrupt  %s '%s'\n", a.checkpoint.c_str(), what.c_str(), kind, a.clean.c_str(),
              kind, a.corrupt.c_str());
}

std::string tokens(std::size_t n) { return ", " + std::to_string(n) + " tokens"; }

}  // namespace

int patch(const PatchArgs& a) {
  return with_two_runs(a, [&](Loaded& l) {
    interp::PatchRequest r;
    two_runs(a, l, r);
    r.point = a.point;
    const interp::PatchingResult result = interp::patch(l, r);
    if (a.json) {
      std::printf("%s", interp::patching_json(result, *l.task).c_str());
      return 0;
    }
    print_header(a, "activation patching" + tokens(result.clean_tokens.size()));
    std::printf("%s", interp::format_patching(result, *l.task).c_str());
    return 0;
  });
}

int attribute(const AttributeArgs& a) {
  return with_two_runs(a, [&](Loaded& l) {
    interp::AttributeRequest r;
    two_runs(a, l, r);
    r.method = interp::attribution_method_names().parse(a.method, "--method");
    r.steps = a.steps;
    r.noise = a.noise;
    const interp::AttributionResult result = interp::attribute(l, r);
    if (a.json) {
      std::printf("%s", interp::to_json(result, *l.task).c_str());
      return 0;
    }
    print_header(a, "attribution" + tokens(result.tokens.size()));
    std::printf("%s", interp::format_attribution(result, *l.task, a.edges).c_str());
    return 0;
  });
}

int path(const PathArgs& a) {
  return with_two_runs(a, [&](Loaded& l) {
    interp::PathPatchRequest r;
    two_runs(a, l, r);
    std::vector<interp::HeadRef> sender;
    as_field("--sender", [&] { sender = interp::parse_heads(a.sender, interp::heads_per_layer(*l.model)); });
    if (sender.size() != 1) field_error("--sender", "expected one head LAYER.HEAD", a.sender);
    r.sender = sender.front();
    for (std::size_t i = 0; i < a.receivers.size(); ++i)
      r.receivers.push_back(interp::parse_receiver(a.receivers[i], "receivers[" + std::to_string(i) + "]"));
    const interp::PathPatchResult result = interp::path_patch(l, r);
    if (a.json) {
      std::printf("%s", interp::to_json(result, *l.task).c_str());
      return 0;
    }
    print_header(a, "path patching from head " + interp::head_name(r.sender));
    std::printf("%s", interp::format_path_patch(result, *l.task).c_str());
    return 0;
  });
}

int lens(const LensArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load_for(a.checkpoint, a.input);
    interp::LensRequest r;
    r.input = input_request(a.input, &l);
    if (a.has_position) r.position = a.position;
    if (!a.answer.empty()) r.answer = a.answer;
    if (!a.wrong.empty()) r.wrong = a.wrong;
    r.ids = a.input.ids;
    r.top_k = a.top_k;
    const interp::LensResult result = interp::logit_lens(l, r);
    if (a.json)
      std::printf("%s", interp::to_json(result, *l.task).c_str());
    else
      std::printf("%s, %s\n%s", a.checkpoint.c_str(), model::describe(r.input).c_str(),
                  interp::format_lens(result, *l.task).c_str());
    return 0;
  });
}

}  // namespace qkv::app
