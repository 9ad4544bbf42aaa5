// The task of a rasp program: random inputs of its domain, labelled by the reference interpreter.
#include "qkv/data/program_task.hpp"

#include <algorithm>
#include <cctype>

#include "qkv/rasp/evaluate.hpp"
#include "row_task.hpp"

namespace qkv::data {

ProgramLayout program_layout(const rasp::Program& p) {
  ProgramLayout l;
  l.tokens = p.vocab.size();
  l.bos = Index(l.tokens);
  l.pad = Index(l.tokens + 1);
  l.classes = p.nodes[p.output].values.size();
  l.input_vocab = p.causal ? std::max(l.tokens + 2, l.classes) : l.tokens + 2;
  l.length = p.max_len + 1;
  return l;
}

void program_row(const rasp::Program& p, const std::vector<std::size_t>& tokens, Index* input, Index* target) {
  const ProgramLayout l = program_layout(p);
  const std::vector<rasp::Cell> out = rasp::run(p, tokens);
  std::fill(input, input + l.length, l.pad);
  std::fill(target, target + l.length, kIgnore);
  input[0] = l.bos;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    input[1 + i] = Index(tokens[i]);
    if (out[i].some()) target[1 + i] = Index(p.value_index(p.output, out[i].value));
  }
}

namespace {

class ProgramTask final : public RowTask {
 public:
  explicit ProgramTask(std::shared_ptr<const rasp::Program> p) : p_(std::move(p)), l_(program_layout(*p_)) {}
  std::string name() const override { return "program"; }
  std::size_t input_vocab() const override { return l_.input_vocab; }
  std::size_t num_classes() const override { return l_.classes; }
  std::size_t input_length() const override { return l_.length; }
  Index pad_token() const override { return l_.pad; }
  std::string token_label(Index id) const override {
    if (id == l_.bos) return "BOS";
    if (id == l_.pad) return "PAD";
    if (id >= 0 && std::size_t(id) < l_.tokens) return p_->vocab[std::size_t(id)].label();
    return std::to_string(id);
  }
  // The tokens of the text, after BOS: words separated by spaces, or else the longest token of
  // the vocabulary at each place (one per character when every token is one character).
  Batch text_row(const std::string& text, const std::string& what, const std::string&) const override {
    std::vector<std::string> words;
    std::vector<std::string> labels;
    for (auto& v : p_->vocab) labels.push_back(v.label());
    if (text.find_first_of(" \t") != std::string::npos) {
      std::string w;
      for (char ch : text + " ")
        if (ch == ' ' || ch == '\t') {
          if (!w.empty()) words.push_back(w);
          w.clear();
        } else {
          w += ch;
        }
    } else {
      const std::u32string chars = decode_utf8(text, what);
      std::vector<std::u32string> tokens;
      for (auto& l : labels) tokens.push_back(decode_utf8(l, "the program's token '" + l + "'"));
      for (std::size_t at = 0; at < chars.size();) {
        std::size_t best = 1;  // an unknown character is a token of its own, and named below
        for (auto& t : tokens)
          if (t.size() > best && chars.compare(at, t.size(), t) == 0) best = t.size();
        words.push_back(encode_utf8(chars.substr(at, best)));
        at += best;
      }
    }
    if (words.empty()) throw ValueError(what + ": empty; give at least one token");
    if (words.size() > p_->max_len)
      throw ValueError(what + ": " + std::to_string(words.size()) + " tokens, more than the program's max_len " +
                       std::to_string(p_->max_len));
    std::vector<std::size_t> ids;
    for (auto& w : words) {
      const auto it = std::find(labels.begin(), labels.end(), w);
      if (it == labels.end())
        throw ValueError(what + ": '" + w + "' is not a token of the program (its vocabulary: " + join_names(labels) + ")" +
                         did_you_mean(w, labels));
      ids.push_back(std::size_t(it - labels.begin()));
    }
    Batch b;
    b.inputs = IndexArray::from_shape({1, ids.size() + 1});
    b.targets = IndexArray::from_shape({1, ids.size() + 1});
    b.decoder_inputs = IndexArray::from_shape({0});
    std::vector<Index> in(l_.length), tg(l_.length);
    program_row(*p_, ids, in.data(), tg.data());
    std::copy(in.begin(), in.begin() + long(ids.size() + 1), b.inputs.data());
    std::copy(tg.begin(), tg.begin() + long(ids.size() + 1), b.targets.data());
    return b;
  }

 protected:
  void fill(Generator& gen, Index* input, Index* target) const override {
    std::vector<std::size_t> tokens(1 + gen.randint(p_->max_len));
    for (auto& t : tokens) t = gen.randint(l_.tokens);
    program_row(*p_, tokens, input, target);
  }

 private:
  std::shared_ptr<const rasp::Program> p_;
  ProgramLayout l_;
};

}  // namespace

std::unique_ptr<Task> make_program_task(std::shared_ptr<const rasp::Program> program) {
  return std::make_unique<ProgramTask>(std::move(program));
}

}  // namespace qkv::data
