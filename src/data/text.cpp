#include "qkv/data/text.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

namespace qkv::data {

namespace {

constexpr const char* kWhitespace = " \t\n\r\v\f";

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", unsigned(b));
  return buf;
}

std::string code_point_name(char32_t c) {  // "U+00E9"
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", unsigned(c));
  return buf;
}

// Entries of a list in an error message, the first `most` of them, then "and K more".
std::string list_some(const std::vector<std::string>& items, std::size_t most = 8) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < most; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > most) s += ", and " + std::to_string(items.size() - most) + " more";
  return s;
}

// ---------------------------------------------------------------------------------------------
// Files

struct TextFile {
  std::string path, bytes;
};

struct Found {
  std::vector<TextFile> files;
  std::vector<std::string> skipped;  // "F (reason)"
};

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw ValueError("task.path: cannot read " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  std::size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, k);
  const bool failed = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  if (failed) throw ValueError("task.path: cannot read " + path + ": " + std::strerror(err));
  return out;
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::size_t k = std::strlen(suffix);
  return s.size() >= k && s.compare(s.size() - k, k, suffix) == 0;
}

// Reads a regular file; keeps it unless it holds a NUL byte. Returns where the first NUL is (npos: none).
std::size_t add_file(const std::string& path, Found& found) {
  std::string bytes = read_file(path);
  const std::size_t nul = bytes.find('\0');
  if (nul != std::string::npos)
    found.skipped.push_back(path + " (binary: NUL byte at byte " + std::to_string(nul) + ")");
  else
    found.files.push_back({path, std::move(bytes)});
  return nul;
}

// Every regular file below `dir`; links are not followed, hidden names and .dat files are skipped.
void walk(const std::string& dir, Found& found) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string p = e.path().string(), leaf = e.path().filename().string();
    const fs::file_status st = e.symlink_status(ec);
    if (ec) break;
    if (!leaf.empty() && leaf[0] == '.') {
      if (fs::is_directory(st)) it.disable_recursion_pending();
      found.skipped.push_back(p + " (hidden)");
    } else if (fs::is_symlink(st)) {
      found.skipped.push_back(p + " (symbolic link)");
    } else if (fs::is_directory(st)) {
      continue;
    } else if (!fs::is_regular_file(st)) {
      found.skipped.push_back(p + " (not a regular file)");
    } else if (ends_with(leaf, ".dat")) {
      found.skipped.push_back(p + " (fortune index .dat)");
    } else {
      add_file(p, found);
    }
  }
  if (ec) throw ValueError("task.path: cannot list directory " + dir + ": " + ec.message());
}

bool is_pattern(const std::string& path) { return path.find_first_of("*?[{") != std::string::npos; }

std::string skipped_note(const Found& found) {
  if (found.skipped.empty()) return "(it holds no files)";
  std::vector<std::string> s = found.skipped;
  std::sort(s.begin(), s.end());
  return "(skipped " + std::to_string(s.size()) + ": " + list_some(s) + ")";
}

// The text files of a corpus path with their bytes, sorted by path, each once.
std::vector<TextFile> find_text_files(const std::string& path) {
  if (path.empty()) throw ValueError("task.path: expected a file, a directory or a glob pattern, found an empty string");
  Found found;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {  // a path named literally: a link to it is followed
    if (S_ISDIR(st.st_mode)) {
      walk(path, found);
      if (found.files.empty())
        throw ValueError("task.path: directory " + path + " has no text files " + skipped_note(found));
    } else if (S_ISREG(st.st_mode)) {
      const std::size_t nul = add_file(path, found);
      if (nul != std::string::npos)
        throw ValueError("task.path: " + path + " is not a text file (NUL byte at byte " + std::to_string(nul) + ")");
    } else {
      throw ValueError("task.path: " + path + " is neither a regular file nor a directory");
    }
  } else if (!is_pattern(path)) {
    if (errno == ENOENT || errno == ENOTDIR) throw ValueError("task.path: no such file or directory: " + path);
    throw ValueError("task.path: cannot access " + path + ": " + std::strerror(errno));
  } else {  // a pattern (stat may also have failed with ENAMETOOLONG on a long {a,b,...} list)
    int flags = 0;
#ifdef GLOB_BRACE
    flags |= GLOB_BRACE;
#endif
    glob_t g{};
    const int rc = ::glob(path.c_str(), flags, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    globfree(&g);
    if (rc == GLOB_NOMATCH || matches.empty()) throw ValueError("task.path: " + path + " matches no files");
    if (rc != 0) throw ValueError("task.path: cannot expand the pattern " + path + " (glob error " + std::to_string(rc) + ")");
    for (const std::string& m : matches) {
      struct stat ls {};
      if (::lstat(m.c_str(), &ls) != 0)
        found.skipped.push_back(m + " (" + std::strerror(errno) + ")");
      else if (S_ISLNK(ls.st_mode))
        found.skipped.push_back(m + " (symbolic link)");
      else if (S_ISDIR(ls.st_mode))
        walk(m, found);
      else if (!S_ISREG(ls.st_mode))
        found.skipped.push_back(m + " (not a regular file)");
      else if (ends_with(m, ".dat"))
        found.skipped.push_back(m + " (fortune index .dat)");
      else
        add_file(m, found);
    }
    if (found.files.empty()) throw ValueError("task.path: " + path + " matches no text files " + skipped_note(found));
  }
  std::vector<TextFile>& f = found.files;
  std::sort(f.begin(), f.end(), [](const TextFile& a, const TextFile& b) { return a.path < b.path; });
  f.erase(std::unique(f.begin(), f.end(), [](const TextFile& a, const TextFile& b) { return a.path == b.path; }), f.end());
  return std::move(f);
}

// ---------------------------------------------------------------------------------------------
// UTF-8

constexpr const char* kByteHint = "; use task.tokenizer: byte for non-UTF-8 text";

bool continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Scans `s` as strict UTF-8, appending the code points to `out` when given. On the first bad
// sequence throws, naming `where`, its offset and line, its bytes and the rule it breaks.
void scan_utf8(std::string_view s, const std::string& where, const char* hint, std::u32string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  auto fail = [&](std::size_t len, const std::string& why) {
    const std::size_t line = 1 + std::size_t(std::count(s.begin(), s.begin() + i, '\n'));
    std::string bytes;
    for (std::size_t k = 0; k < len && i + k < n; ++k) bytes += (k ? " " : "") + hex_byte(p[i + k]);
    throw ValueError(where + ": not valid UTF-8 at byte " + std::to_string(i) + ", line " + std::to_string(line) +
                     " (" + bytes + "): " + why + hint);
  };
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      if (out) out->push_back(char32_t(b));
      ++i;
      continue;
    }
    // The length a lead byte announces, and the range its second byte must be in (RFC 3629 table):
    // narrower than 0x80-0xBF exactly where the other values would be overlong, surrogates or
    // above U+10FFFF.
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b < 0xC0) fail(1, "unexpected continuation byte (no lead byte before it)");
    if (b < 0xC2) fail(2, "overlong encoding (0xC0 and 0xC1 only start overlong forms of ASCII)");
    if (b < 0xE0) {
      len = 2;
    } else if (b < 0xF0) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b < 0xF5) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      fail(1, b < 0xF8 ? "code point above U+10FFFF" : "byte never used in UTF-8");
    }
    char32_t c = b & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (std::size_t k = 1; k < len; ++k) {
      if (i + k >= n)
        fail(len, "truncated sequence: the text ends " + std::to_string(len - k) + " byte" + (len - k > 1 ? "s" : "") +
                      " short of a " + std::to_string(len) + "-byte sequence");
      const unsigned char x = p[i + k];
      if (!continuation(x)) fail(k + 1, "invalid continuation byte");
      if (k == 1 && (x < lo || x > hi))
        fail(len, b == 0xED ? "UTF-16 surrogate (U+D800-U+DFFF)"
                            : b == 0xF4 ? "code point above U+10FFFF" : "overlong encoding");
      c = (c << 6) | (x & 0x3F);
    }
    if (out) out->push_back(c);
    i += len;
  }
}

bool scalar_value(char32_t c) { return c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF); }

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

// Characters a table cannot show as themselves: controls, spaces other than U+0020, invisible
// format characters and variation selectors.
bool invisible(char32_t c) {
  return c < 0x20 || (c >= 0x7F && c < 0xA0) || c == 0xA0 || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
         (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 || (c >= 0xFE00 && c <= 0xFE0F) ||
         c == 0xFEFF || (c >= 0xFFF0 && c <= 0xFFFB) || (c >= 0xE0000 && c <= 0xE0FFF);
}

std::string char_label(char32_t c) {
  switch (c) {
    case ' ': return "\xE2\x90\xA0";  // U+2420 SYMBOL FOR SPACE
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    default: break;
  }
  if (invisible(c)) return code_point_name(c);
  std::string s;
  append_utf8(c, s);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Cleaning

constexpr char kEsc = '\x1b';

bool in(unsigned char b, unsigned lo, unsigned hi) { return b >= lo && b <= hi; }

// The end of the escape sequence starting at t[i] == ESC (see clean_text in the header).
std::size_t escape_end(std::string_view t, std::size_t i) {
  const std::size_t n = t.size();
  std::size_t j = i + 1;
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(t[k]); };
  if (j < n && t[j] == '[') {
    ++j;
    while (j < n && in(at(j), 0x30, 0x3F)) ++j;
    while (j < n && in(at(j), 0x20, 0x2F)) ++j;
    if (j < n && in(at(j), 0x40, 0x7E)) ++j;
    return j;
  }
  while (j < n && in(at(j), 0x20, 0x2F)) ++j;
  if (j < n && in(at(j), 0x30, 0x7E)) ++j;
  return j;
}

// A line (without its '\n') that is a fortune separator: "%" then only spaces, tabs, '\r'.
bool separator_line(std::string_view line) {
  return !line.empty() && line[0] == '%' &&
         line.find_first_not_of(" \t\r", 1) == std::string_view::npos;
}

std::string strip_escapes(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  std::size_t i = 0;
  while (i < t.size()) {
    const std::size_t e = t.find(kEsc, i);
    if (e == std::string_view::npos) {
      out.append(t.substr(i));
      break;
    }
    out.append(t.substr(i, e - i));
    i = escape_end(t, e);
  }
  return out;
}

// Calls f(line, has_newline) for each line of t: the text between '\n's, the last one possibly
// without a '\n' (and none at all after a final '\n').
template <class F>
void for_each_line(std::string_view t, F&& f) {
  std::size_t i = 0;
  while (i < t.size()) {
    const std::size_t e = t.find('\n', i);
    if (e == std::string_view::npos) {
      f(t.substr(i), false);
      return;
    }
    f(t.substr(i, e - i), true);
    i = e + 1;
  }
}

// Each file's text is followed by "\n" unless it already ends in one.
void append_file_text(std::string_view text, Corpus& c) {
  c.text.append(text);
  if (text.back() != '\n') c.text += '\n';
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const NameTable<TextClean>& text_clean_names() {
  static const NameTable<TextClean> table{{"auto", TextClean::Auto}, {"on", TextClean::On}, {"off", TextClean::Off}};
  return table;
}
const NameTable<TokenizerKind>& tokenizer_names() {
  static const NameTable<TokenizerKind> table{
      {"byte", TokenizerKind::Byte}, {"char", TokenizerKind::Char}, {"word", TokenizerKind::Word}};
  return table;
}
const char* name(TextClean clean) { return text_clean_names().name(clean); }
TextClean parse_text_clean(const std::string& s) { return text_clean_names().parse(s, "task.clean"); }
const char* name(TokenizerKind kind) { return tokenizer_names().name(kind); }
TokenizerKind parse_tokenizer(const std::string& s) { return tokenizer_names().parse(s, "task.tokenizer"); }

std::vector<std::string> corpus_files(const std::string& path) {
  std::vector<std::string> out;
  for (TextFile& f : find_text_files(path)) out.push_back(std::move(f.path));
  return out;
}

std::string clean_text(std::string_view text) {
  const std::string s = strip_escapes(text);
  std::string out;
  out.reserve(s.size());
  for_each_line(s, [&](std::string_view line, bool newline) {
    if (!separator_line(line)) out.append(line);
    if (newline) out += '\n';
  });
  return out;
}

bool needs_cleaning(std::string_view text) {
  if (text.find(kEsc) != std::string_view::npos) return true;  // every ESC is removed
  bool found = false;
  for_each_line(text, [&](std::string_view line, bool) { found = found || separator_line(line); });
  return found;
}

Corpus load_corpus(const std::string& path, TextClean clean, bool require_utf8) {
  std::vector<TextFile> files = find_text_files(path);
  Corpus c;
  c.path = path;
  std::size_t total = 0;
  for (const TextFile& f : files) total += f.bytes.size() + 1;
  c.text.reserve(total);
  for (TextFile& f : files) {
    if (require_utf8) scan_utf8(f.bytes, f.path, kByteHint, nullptr);
    const bool run = clean == TextClean::On || (clean == TextClean::Auto && needs_cleaning(f.bytes));
    if (run) {
      f.bytes = clean_text(f.bytes);
      c.cleaned = true;
    }
    if (!f.bytes.empty()) {
      c.files.push_back(f.path);
      c.file_starts.push_back(c.text.size());
      append_file_text(f.bytes, c);
    }
    std::string().swap(f.bytes);  // the raw copy is not needed any more
  }
  if (c.text.empty())
    throw ValueError("task.path: corpus " + path + " has no text: its " + std::to_string(files.size()) + " file" +
                     (files.size() == 1 ? " is" : "s are") + " empty" + (c.cleaned ? " after cleaning" : ""));
  return c;
}

std::u32string decode_utf8(std::string_view bytes, const std::string& where) {
  std::u32string out;
  out.reserve(std::size_t(std::count_if(bytes.begin(), bytes.end(), [](char b) { return !continuation(b); })));
  scan_utf8(bytes, where, "", &out);
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!scalar_value(text[i]))
      throw ValueError("encode_utf8: " + code_point_name(text[i]) + " at position " + std::to_string(i) +
                       " is not a Unicode scalar value (a surrogate or above U+10FFFF)");
    append_utf8(text[i], out);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

Tokenizer Tokenizer::bytes() { return Tokenizer(TokenizerKind::Byte, {}); }

Tokenizer Tokenizer::chars(std::u32string_view training_text) {
  if (training_text.empty()) throw ValueError("Tokenizer::chars: the training text is empty");
  // A presence bit per code point: linear in the text, and the vocabulary comes out sorted.
  std::vector<bool> seen(0x110000, false);
  for (std::size_t i = 0; i < training_text.size(); ++i) {
    const char32_t c = training_text[i];
    if (!scalar_value(c))
      throw ValueError("Tokenizer::chars: " + code_point_name(c) + " at position " + std::to_string(i) +
                       " is not a Unicode scalar value");
    seen[c] = true;
  }
  std::vector<char32_t> cps;
  for (char32_t c = 0; c < 0x110000; ++c)
    if (seen[c]) cps.push_back(c);
  return Tokenizer(TokenizerKind::Char, std::move(cps));
}

Tokenizer Tokenizer::from_vocab(TokenizerKind kind, const std::vector<std::uint32_t>& code_points) {
  const std::string what = std::string("tokenizer vocabulary (") + name(kind) + "): ";
  if (kind == TokenizerKind::Byte) {
    if (!code_points.empty())
      throw ValueError(what + "expected no code points (ids are byte values), found " +
                       std::to_string(code_points.size()));
    return bytes();
  }
  if (kind == TokenizerKind::Word) return Tokenizer(kind, {}, words_from_vocab(code_points));
  if (code_points.empty()) throw ValueError(what + "expected at least one code point, found none");
  std::vector<char32_t> cps;
  cps.reserve(code_points.size());
  for (std::size_t i = 0; i < code_points.size(); ++i) {
    const std::uint32_t c = code_points[i];
    const std::string at = " at position " + std::to_string(i);
    if (c > 0x10FFFF) throw ValueError(what + "code point " + code_point_name(c) + at + " is above U+10FFFF");
    if (c >= 0xD800 && c <= 0xDFFF) throw ValueError(what + "code point " + code_point_name(c) + at + " is a surrogate");
    if (i > 0 && c == code_points[i - 1]) throw ValueError(what + code_point_name(c) + at + " is a duplicate");
    if (i > 0 && c < code_points[i - 1])
      throw ValueError(what + "expected increasing code points, found " + code_point_name(c) + at + " after " +
                       code_point_name(code_points[i - 1]));
    cps.push_back(char32_t(c));
  }
  return Tokenizer(TokenizerKind::Char, std::move(cps));
}

Tokenizer Tokenizer::words(std::vector<std::string> words) {
  if (words.empty()) throw ValueError("Tokenizer::words: no words given");
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const std::string at = "Tokenizer::words: word " + std::to_string(i);
    if (w.empty()) throw ValueError(at + " is empty");
    if (w.find_first_of(kWhitespace) != std::string::npos) throw ValueError(at + " ('" + w + "') holds whitespace");
    decode_utf8(w, at);
  }
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  return Tokenizer(TokenizerKind::Word, {}, std::move(words));
}

std::vector<std::uint32_t> words_to_vocab(const std::vector<std::string>& words) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i) out.push_back('\n');
    for (char32_t c : decode_utf8(words[i], "words_to_vocab")) out.push_back(c);
  }
  return out;
}

std::vector<std::string> words_from_vocab(const std::vector<std::uint32_t>& code_points) {
  const std::string what = "tokenizer vocabulary (word): ";
  if (code_points.empty()) throw ValueError(what + "expected at least one word, found none");
  std::vector<std::string> words(1);
  for (std::size_t i = 0; i < code_points.size(); ++i) {
    const std::uint32_t c = code_points[i];
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
      throw ValueError(what + "code point " + code_point_name(c) + " at position " + std::to_string(i) +
                       " is not a Unicode scalar value");
    if (c == '\n')
      words.emplace_back();
    else
      append_utf8(char32_t(c), words.back());
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string at = " at position " + std::to_string(i);
    if (words[i].empty()) throw ValueError(what + "word" + at + " is empty");
    if (words[i].find_first_of(kWhitespace) != std::string::npos)
      throw ValueError(what + "word '" + words[i] + "'" + at + " holds whitespace");
    if (i > 0 && words[i] == words[i - 1]) throw ValueError(what + "'" + words[i] + "'" + at + " is a duplicate");
    if (i > 0 && words[i] < words[i - 1])
      throw ValueError(what + "expected words in increasing byte order, found '" + words[i] + "'" + at + " after '" +
                       words[i - 1] + "'");
  }
  return words;
}

std::vector<std::uint32_t> Tokenizer::to_vocab() const {
  if (kind_ == TokenizerKind::Word) return words_to_vocab(words_);
  return std::vector<std::uint32_t>(code_points_.begin(), code_points_.end());
}

Index Tokenizer::id_of(char32_t c) const {
  auto it = std::lower_bound(code_points_.begin(), code_points_.end(), c);
  return it != code_points_.end() && *it == c ? Index(it - code_points_.begin()) : -1;
}

Index Tokenizer::id_of(std::string_view word) const {
  auto it = std::lower_bound(words_.begin(), words_.end(), word);
  return it != words_.end() && *it == word ? Index(it - words_.begin()) : -1;
}

std::vector<Index> Tokenizer::encode(std::string_view text, bool allow_unknown, const std::string& what) const {
  if (kind_ == TokenizerKind::Char) return encode(decode_utf8(text, what), allow_unknown, what);
  if (kind_ == TokenizerKind::Word) {
    decode_utf8(text, what);
    std::vector<Index> ids;
    std::vector<std::string> unknown;  // distinct, in order of first appearance
    for (std::size_t i = text.find_first_not_of(kWhitespace); i != std::string_view::npos;) {
      const std::size_t end = std::min(text.size(), text.find_first_of(kWhitespace, i));
      const std::string_view w = text.substr(i, end - i);
      Index id = id_of(w);
      if (id < 0) {
        id = unk();
        if (!allow_unknown && std::find(unknown.begin(), unknown.end(), w) == unknown.end()) unknown.emplace_back(w);
      }
      ids.push_back(id);
      i = text.find_first_not_of(kWhitespace, end);
    }
    if (!unknown.empty()) {
      for (std::string& w : unknown) w = "'" + w + "'";
      throw ValueError(what + ": " + std::to_string(unknown.size()) + " word" + (unknown.size() > 1 ? "s are" : " is") +
                       " not in the vocabulary (of " + std::to_string(words_.size()) + " words): " + list_some(unknown, 20));
    }
    return ids;
  }
  std::vector<Index> ids(text.size());
  std::transform(text.begin(), text.end(), ids.begin(), [](char b) { return Index(static_cast<unsigned char>(b)); });
  return ids;
}

std::vector<Index> Tokenizer::encode(std::u32string_view text, bool allow_unknown, const std::string& what) const {
  if (kind_ != TokenizerKind::Char) return encode(std::string_view(encode_utf8(text)), allow_unknown, what);
  std::vector<Index> ids(text.size());
  std::vector<char32_t> unknown;  // distinct, in order of first appearance
  std::set<char32_t> unknown_set;
  for (std::size_t i = 0; i < text.size(); ++i) {
    Index id = id_of(text[i]);
    if (id < 0) {
      id = unk();
      if (!allow_unknown && unknown_set.insert(text[i]).second) unknown.push_back(text[i]);
    }
    ids[i] = id;
  }
  if (!unknown.empty()) {
    std::vector<std::string> shown;
    for (char32_t c : unknown) shown.push_back("'" + char_label(c) + "' " + code_point_name(c));
    throw ValueError(what + ": " + std::to_string(unknown.size()) + " character" + (unknown.size() > 1 ? "s are" : " is") +
                     " not in the vocabulary (the " + std::to_string(code_points_.size()) +
                     " characters of the training split): " + list_some(shown, 20));
  }
  return ids;
}

std::string Tokenizer::decode(const Index* ids, std::size_t n) const {
  const Index V = Index(size());
  std::string out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Index id = ids[i];
    if (id < 0 || id >= V)
      throw ValueError("Tokenizer::decode: id " + std::to_string(id) + " at position " + std::to_string(i) +
                       " is outside [0, " + std::to_string(V) + ")");
    if (kind_ == TokenizerKind::Byte)
      out += char(static_cast<unsigned char>(id));
    else if (kind_ == TokenizerKind::Word)
      out += (i ? " " : "") + (id == unk() ? encode_utf8(U"\uFFFD") : words_[std::size_t(id)]);
    else
      append_utf8(id == unk() ? char32_t(0xFFFD) : code_points_[std::size_t(id)], out);
  }
  return out;
}

std::string Tokenizer::token_label(Index id) const {
  if (id < 0 || id >= Index(size()))
    throw ValueError("Tokenizer::token_label: id " + std::to_string(id) + " is outside [0, " + std::to_string(size()) + ")");
  if (kind_ == TokenizerKind::Char) return id == unk() ? "<unk>" : char_label(code_points_[std::size_t(id)]);
  if (kind_ == TokenizerKind::Word) return id == unk() ? "<unk>" : words_[std::size_t(id)];
  // One rule with the char labels: an ASCII byte is labelled as the character, where a char
  // tokenizer shows it as itself or by a backslash escape; every other byte (the controls a char
  // tokenizer names U+XXXX, DEL, bytes >= 0x80) is \xNN.
  const auto b = static_cast<unsigned char>(id);
  if (b < 0x80 && (!invisible(b) || b == '\n' || b == '\t' || b == '\r')) return char_label(b);
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(b));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Split and pipeline

TextSplit split_text(std::size_t n, double val_fraction, double test_fraction) {
  auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  auto check = [&](double f, const char* key) {
    if (!(f >= 0.0 && f < 1.0)) throw ValueError(std::string(key) + ": expected a number in [0, 1), found " + num(f));
  };
  check(val_fraction, "task.val_fraction");
  check(test_fraction, "task.test_fraction");
  if (val_fraction + test_fraction >= 1.0)
    throw ValueError("task.val_fraction + task.test_fraction: expected less than 1 (the rest trains), found " +
                     num(val_fraction) + " + " + num(test_fraction) + " = " + num(val_fraction + test_fraction));
  const double N = double(n);
  auto part = [&](double f) { return std::min(n, std::size_t(std::floor(N * f + N * 1e-12))); };
  const std::size_t n_val = part(val_fraction), n_test = std::min(n - n_val, part(test_fraction));
  const std::size_t n_train = n - n_val - n_test;
  return TextSplit{0, n_train, n_train, n_train + n_val, n_train + n_val, n};
}

std::optional<TextPlace> find_in_corpus(const Corpus& corpus, std::string_view literal) {
  const std::size_t at = corpus.text.find(literal);
  if (at == std::string::npos || corpus.files.empty()) return std::nullopt;
  const std::size_t i = std::size_t(std::upper_bound(corpus.file_starts.begin(), corpus.file_starts.end(), at) -
                                    corpus.file_starts.begin()) - 1;
  TextPlace p{corpus.files[i], at - corpus.file_starts[i], 0, true};
  std::string text = corpus.text.substr(corpus.file_starts[i], p.byte + literal.size());
  if (corpus.cleaned) {  // the offset in the file as stored, when cleaning did not make the literal
    const std::string raw = read_file(p.file);
    std::size_t r = raw.find(literal);
    while (r != std::string::npos && r > 0 && raw[r - 1] == kEsc) r = raw.find(literal, r + 1);  // ESC[ ... is removed
    if (r != std::string::npos) text = raw.substr(0, r + literal.size()), p.byte = r, p.cleaned = false;
  } else {
    p.cleaned = false;
  }
  p.line = 1 + std::size_t(std::count(text.begin(), text.begin() + long(p.byte), '\n'));
  return p;
}

TextData load_text_data(const std::string& path, TokenizerKind kind, TextClean clean, double val_fraction,
                        double test_fraction, std::size_t min_tokens, const Tokenizer* tokenizer, const char* window) {
  if (kind == TokenizerKind::Word)
    throw ValueError("task.tokenizer: a corpus is read as byte or char tokens; word is the English grammar's vocabulary");
  TextData d;
  d.corpus = load_corpus(path, clean, kind == TokenizerKind::Char);
  std::u32string chars;
  if (kind == TokenizerKind::Char) chars = decode_utf8(d.corpus.text, path);  // valid: every file was checked
  const std::size_t n = kind == TokenizerKind::Char ? chars.size() : d.corpus.text.size();
  const TextSplit s = split_text(n, val_fraction, test_fraction);

  auto require = [&](std::size_t size, const char* split, const char* advice) {
    if (size < min_tokens || size == 0)
      throw ValueError(std::string("task: the ") + split + " split has " + std::to_string(size) +
                       " tokens, fewer than one window of " + window + " = " + std::to_string(min_tokens) +
                       " (corpus " + path + " has " + std::to_string(n) + " tokens; lower task.length or " + advice + ")");
  };
  require(s.train_end - s.train_begin, "training",
          val_fraction + test_fraction > 0 ? "lower task.val_fraction and task.test_fraction" : "use a larger corpus");
  if (val_fraction > 0) require(s.val_end - s.val_begin, "validation", "raise task.val_fraction");
  if (test_fraction > 0) require(s.test_end - s.test_begin, "test", "raise task.test_fraction");

  auto slice = [](auto t, std::size_t begin, std::size_t end) { return t.substr(begin, end - begin); };
  auto encode_splits = [&](auto t) {  // val and test may hold characters the training split has not
    d.train = d.tokenizer.encode(slice(t, s.train_begin, s.train_end), true, path);
    d.val = d.tokenizer.encode(slice(t, s.val_begin, s.val_end), true, path);
    d.test = d.tokenizer.encode(slice(t, s.test_begin, s.test_end), true, path);
  };
  if (kind == TokenizerKind::Byte) {
    d.tokenizer = Tokenizer::bytes();
    encode_splits(std::string_view(d.corpus.text));
  } else {
    const std::u32string_view t = chars;
    d.tokenizer = tokenizer ? *tokenizer : Tokenizer::chars(slice(t, s.train_begin, s.train_end));
    encode_splits(t);
  }
  d.tokens = n;
  return d;
}

}  // namespace qkv::data
