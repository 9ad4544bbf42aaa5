#pragma once
// Internal to src/rasp: the tokens of a program's text, and the functions of maps (expressions
// and lookup tables) parsed from them.

#include <memory>
#include <string>
#include <vector>

#include "qkv/rasp/program.hpp"

namespace qkv::rasp::syntax {

enum class Tok { Name, Number, String, Punct, Newline, End };

struct Token {
  Tok kind = Tok::End;
  std::string text;  ///< names, numbers and punctuation as written; strings unescaped
  int line = 0;
  std::size_t begin = 0, end = 0;  ///< byte offsets of the token in the source
  bool is(const char* punct) const { return kind == Tok::Punct && text == punct; }
  bool is_name(const char* word) const { return kind == Tok::Name && text == word; }
};

/// The tokens of `source`. Newlines end statements only outside parentheses and braces (a call
/// may span lines); '#' starts a comment. ProgramError for a character that starts no token or
/// an unterminated string.
std::vector<Token> lex(const std::string& source, const std::string& path);

/// "name 'x'", "number 3", "string \"a\"", "'('", "the end of the line": for "expected ..., found ...".
std::string describe(const Token& t);

/// A cursor over the tokens of one program, with the errors every reader raises.
class Cursor {
 public:
  Cursor(const std::vector<Token>& tokens, const std::string& path, const std::string& source)
      : tokens_(tokens), path_(path), source_(source) {}
  const Token& peek(std::size_t ahead = 0) const;
  const Token& next();
  /// Consumes punctuation `punct` or throws "expected 'p' ..., found ..." under `construct`.
  const Token& expect(const char* punct, const std::string& construct, const std::string& context = "");
  [[noreturn]] void fail(const Token& at, const std::string& construct, const std::string& message) const;
  /// The source text from token `first` to the last token consumed.
  std::string text_from(std::size_t first) const;
  std::size_t position() const { return at_; }
  const std::string& path() const { return path_; }

 private:
  const std::vector<Token>& tokens_;
  const std::string& path_;
  const std::string& source_;
  std::size_t at_ = 0;
};

/// A literal value: a number (with an optional '-'), a string, true/false, or a bare word (a
/// symbol). `construct` names the statement in errors.
Value parse_value(Cursor& c, const std::string& construct);

/// The function argument of map (variables {"x"}) or sequence_map ({"x", "y"}): a lookup table
/// `{key: value, ..., _: default}` or an expression over the variables.
std::shared_ptr<const Function> parse_function(Cursor& c, const std::vector<std::string>& variables,
                                               const std::string& construct);

}  // namespace qkv::rasp::syntax
