#include "qkv/model/input.hpp"

namespace qkv::model {
namespace {

// The grammar task reads only sentences of its grammar (it analyses them into words and
// relations); other text of its vocabulary is still something the model can read.
data::Batch plain_row(const data::Task& task, const std::string& text, const std::string& mask_text, std::string& note) {
  try {
    return task.text_row(text, "text", mask_text);
  } catch (const ValueError& e) {
    if (task.name() != "grammar" || !task.tokenizer()) throw;
    data::Batch row = data::ids_row(task, data::encode_with_masks(*task.tokenizer(), text, task.mask_token(), mask_text, "text"),
                                    "text");
    std::string why = e.what();
    if (why.rfind("text: ", 0) == 0) why = why.substr(6);
    note = why + "; read as plain tokens, without the grammar's analysis";
    return row;
  }
}

}  // namespace

InputRow input_row(const LoadedModel& l, const InputRequest& r) {
  const data::Task& task = *l.task;
  const int given = int(r.text.has_value()) + int(r.ids.has_value()) + int(r.example.has_value()) + int(r.row.has_value());
  if (given != 1)
    field_error("", "give exactly one of text, ids or example; found " + (given ? std::to_string(given) + " of them" : std::string("none")));
  InputRow in;
  if (r.row) {
    if (r.row->size() != 1) field_error("row", "expected one row, found " + shape_str(r.row->inputs.shape()));
    in.row = *r.row;
  } else if (r.text) {
    if (r.mask_text.empty() && task.masked()) field_error("mask_text", "empty; give how a mask is written in the text");
    as_field("text", [&] {
      in.row = r.plain_text ? plain_row(task, *r.text, r.mask_text, in.note) : task.text_row(*r.text, "text", r.mask_text);
    });
  } else if (r.ids) {
    for (std::size_t i = 0; i < r.ids->size(); ++i)
      if ((*r.ids)[i] < 0 || std::size_t((*r.ids)[i]) >= task.input_vocab())
        field_error("ids[" + std::to_string(i) + "]", "token id " + std::to_string((*r.ids)[i]) +
                                                          " is outside the vocabulary [0, " + std::to_string(task.input_vocab()) + ")");
    as_field("ids", [&] { in.row = data::ids_row(task, *r.ids, "ids"); });
  } else {
    if (!l.data) field_error("example", "held-out examples need the model's data, which was not loaded");
    const data::Batch& set = r.split == data::Split::Test ? l.data->test_set() : l.data->eval_set();
    const char* name = r.split == data::Split::Test ? "test" : "validation";
    if (set.size() == 0) field_error("example", std::string("the ") + name + " set is empty");
    if (*r.example >= set.size())
      field_error("example", std::string("the ") + name + " set has " + std::to_string(set.size()) + " examples (0.." +
                                 std::to_string(set.size() - 1) + ")",
                  std::to_string(*r.example));
    in.row = data::rows(set, *r.example, *r.example + 1);
  }
  if (!r.masks.empty()) {
    const Index mask = task.mask_token();
    if (mask < 0)
      field_error("masks", "the model was trained on task " + task.name() +
                               " without masks (task.objective: causal); masks are for masked language models");
    if (r.example || r.row) field_error("masks", "go with {text} or {ids}, not a held-out example or a whole row");
    const std::size_t T = in.row.inputs.shape()[1];
    for (std::size_t i = 0; i < r.masks.size(); ++i) {
      const std::string at = "masks[" + std::to_string(i) + "]";
      const std::size_t p = r.masks[i];
      if (p >= T) field_error(at, "position " + std::to_string(p) + " is past the row's " + std::to_string(T) + " tokens");
      const Index id = in.row.inputs(0, p);
      if (id == mask) field_error(at, "position " + std::to_string(p) + " is masked already");
      if (id == task.pad_token()) field_error(at, "position " + std::to_string(p) + " is padding");
      in.row.targets(0, p) = id;  // the token hidden is the answer the loss scores
      in.row.inputs(0, p) = mask;
    }
  }
  return in;
}

Index token_class(const data::Task& task, const std::string& token, bool ids, const std::string& field) {
  const std::size_t classes = task.num_classes();
  Index c = -1;
  if (ids || !task.tokenizer()) {
    if (token.empty() || token.size() > 9 || token.find_first_not_of("0123456789") != std::string::npos)
      field_error(field, "expected a class id, a whole number in [0, " + std::to_string(classes - 1) + "], found '" + token + "'");
    c = Index(std::stoll(token));
  } else {
    std::vector<Index> t;
    as_field(field, [&] { t = task.tokenizer()->encode(token, false, field); });
    if (t.size() != 1) field_error(field, "'" + token + "' is " + std::to_string(t.size()) + " tokens for this model; give one token");
    c = t[0];
  }
  if (c < 0 || std::size_t(c) >= classes)
    field_error(field, "'" + token + "' is class " + std::to_string(c) + ", outside the model's " + std::to_string(classes) +
                           " classes (0.." + std::to_string(classes - 1) + ")");
  return c;
}

std::string describe(const InputRequest& r) {
  if (r.example) return std::string("held-out example ") + std::to_string(*r.example);
  if (r.ids) {
    std::string s;
    for (Index id : *r.ids) s += (s.empty() ? "" : " ") + std::to_string(id);
    return "tokens '" + s + "'";
  }
  return "text '" + r.text.value_or("") + "'";
}

}  // namespace qkv::model
