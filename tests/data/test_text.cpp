#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "qkv/data/text.hpp"
#include "qkv/tensor/random.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::data;
namespace fs = std::filesystem;

namespace {

void write(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// The message of the ValueError f throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

std::u32string u32(const std::string& utf8) { return decode_utf8(utf8, "test"); }

std::string decode_error(const std::string& bytes) {
  return error_of([&] { decode_utf8(bytes, "F"); });
}

// A deterministic mix of ASCII words, accented Latin, Chinese, emoji, newlines and '%' lines.
std::string mixed_text(std::size_t bytes, std::uint64_t seed) {
  const char* pieces[] = {"the ", "quick ", "fox ", "jumps. ", "Élan ", "naïve ", "über ", "我爱吃苹果", "猫喜欢追逐老鼠",
                          "，", "😀", "🐈 ", "\n", "\n%\n", "42 ", "(x) "};
  Generator gen(seed);
  std::string s;
  while (s.size() < bytes) s += pieces[gen.randint(std::size(pieces))];
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Tokenizers

TEST_CASE("text: byte tokenizer round-trips every byte value") {
  const Tokenizer t = Tokenizer::bytes();
  CHECK(t.kind() == TokenizerKind::Byte);
  CHECK(t.size() == 256);
  CHECK(t.unk() == -1);
  CHECK(t.to_vocab().empty());
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  all += all + "\xC3\x28 \xED\xA0\x80 我";  // invalid UTF-8 is fine for bytes
  const std::vector<Index> ids = t.encode(std::string_view(all), false, "x");
  REQUIRE(ids.size() == all.size());
  for (int b = 0; b < 256; ++b) CHECK(ids[std::size_t(b)] == b);
  CHECK(t.decode(ids) == all);
  // Code points are encoded as their UTF-8 bytes: one Chinese character is three byte tokens.
  CHECK(t.encode(u32("我"), false, "x") == std::vector<Index>{0xE6, 0x88, 0x91});
}

TEST_CASE("text: char tokenizer round-trips ASCII, accented Latin, CJK and emoji") {
  const std::string samples[] = {"Hello, world!\n", "Ça déjà vu, naïve Ångström", "我爱吃苹果", "猫喜欢追逐老鼠",
                                 "emoji 😀🐈 and 𝄞"};
  std::string all;
  for (const auto& s : samples) all += s;
  const Tokenizer t = Tokenizer::chars(u32(all));
  CHECK(t.kind() == TokenizerKind::Char);
  for (const auto& s : samples) {
    CAPTURE(s);
    const std::vector<Index> ids = t.encode(std::string_view(s), false, "sample");
    CHECK(ids.size() == u32(s).size());
    CHECK(t.decode(ids) == s);
  }
  // A Chinese character (3 bytes) and an emoji (4 bytes) are exactly one token each.
  CHECK(t.encode(std::string_view("我爱吃苹果"), false, "x").size() == 5);
  CHECK(t.encode(std::string_view("猫喜欢追逐老鼠"), false, "x").size() == 7);
  const std::vector<Index> cat = t.encode(std::string_view("🐈"), false, "x");
  REQUIRE(cat.size() == 1);
  CHECK(t.to_vocab()[std::size_t(cat[0])] == 0x1F408);
  const std::u32string cps = u32(all);
  CHECK(t.size() == std::set<char32_t>(cps.begin(), cps.end()).size() + 1);  // + <unk>
}

TEST_CASE("text: char vocabulary is sorted, distinct, and ids follow code points") {
  const Tokenizer t = Tokenizer::chars(u32("banana 香蕉 🍌 banana"));
  const std::vector<std::uint32_t> v = t.to_vocab();
  CHECK(v == std::vector<std::uint32_t>{' ', 'a', 'b', 'n', 0x8549, 0x9999, 0x1F34C});
  CHECK(t.size() == v.size() + 1);
  CHECK(t.unk() == Index(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(t.encode(std::u32string(1, char32_t(v[i])), false, "x")[0] == Index(i));
}

TEST_CASE("text: unknown characters map to unk or are refused with a list of them") {
  const Tokenizer t = Tokenizer::chars(u32("abc \n"));
  const std::vector<Index> ids = t.encode(std::string_view("a é 我 é\tb"), true, "--prompt");
  // vocabulary '\n' ' ' 'a' 'b' 'c', <unk> = 5
  CHECK(ids == std::vector<Index>{2, 1, 5, 1, 5, 1, 5, 5, 3});
  CHECK(t.decode(ids) == "a \uFFFD \uFFFD \uFFFD\uFFFDb");
}

TEST_CASE("text: unknown characters are listed once each with their code points") {
  const Tokenizer t = Tokenizer::chars(u32("abc \n"));
  const std::string msg = error_of([&] { t.encode(std::string_view("a é 我 é\tb"), false, "--prompt"); });
  CHECK(msg.find("--prompt: 3 characters are not in the vocabulary (the 5 characters of the training split)") == 0);
  CHECK(msg.find("'é' U+00E9, '我' U+6211, '\\t' U+0009") != std::string::npos);
  CHECK(msg.find("U+00E9", msg.find("U+00E9") + 1) == std::string::npos);  // listed once
}

TEST_CASE("text: from_vocab rebuilds a tokenizer from to_vocab") {
  const Tokenizer t = Tokenizer::chars(u32("to be or not to be 生存还是毁灭 🙂"));
  const Tokenizer r = Tokenizer::from_vocab(t.kind(), t.to_vocab());
  CHECK(r.size() == t.size());
  CHECK(r.to_vocab() == t.to_vocab());
  const std::string s = "not to be 毁灭 🙂";
  CHECK(r.encode(std::string_view(s), false, "x") == t.encode(std::string_view(s), false, "x"));
  const Tokenizer b = Tokenizer::from_vocab(TokenizerKind::Byte, {});
  CHECK(b.size() == 256);
}

TEST_CASE("text: from_vocab rejects malformed vocabularies") {
  auto err = [](TokenizerKind k, std::vector<std::uint32_t> v) { return error_of([&] { Tokenizer::from_vocab(k, v); }); };
  CHECK(err(TokenizerKind::Char, {'b', 'a'}) ==
        "tokenizer vocabulary (char): expected increasing code points, found U+0061 at position 1 after U+0062");
  CHECK(err(TokenizerKind::Char, {'a', 'b', 'b'}) == "tokenizer vocabulary (char): U+0062 at position 2 is a duplicate");
  CHECK(err(TokenizerKind::Char, {'a', 0xD800}) ==
        "tokenizer vocabulary (char): code point U+D800 at position 1 is a surrogate");
  CHECK(err(TokenizerKind::Char, {'a', 0x110000}) ==
        "tokenizer vocabulary (char): code point U+110000 at position 1 is above U+10FFFF");
  CHECK(err(TokenizerKind::Char, {}) == "tokenizer vocabulary (char): expected at least one code point, found none");
  CHECK(err(TokenizerKind::Byte, {'a'}) ==
        "tokenizer vocabulary (byte): expected no code points (ids are byte values), found 1");
}

TEST_CASE("text: word tokenizer - sorted distinct words, split at whitespace, unknown words listed") {
  const Tokenizer t = Tokenizer::words({"the", "cat", "likes", "to", "chase", "mice", ".", "cat", "xiaoming's"});
  CHECK(t.kind() == TokenizerKind::Word);
  CHECK(t.word_list() == std::vector<std::string>{".", "cat", "chase", "likes", "mice", "the", "to", "xiaoming's"});
  CHECK(t.size() == 9);
  CHECK(t.unk() == 8);
  const std::vector<Index> ids = t.encode(std::string_view("the cat  likes\tto chase mice ."), false, "--text");
  CHECK(ids == std::vector<Index>{5, 1, 3, 6, 2, 4, 0});
  CHECK(t.decode(ids) == "the cat likes to chase mice .");
  CHECK(t.encode(std::u32string(U"the dog"), true, "x") == std::vector<Index>{5, 8});
  CHECK(t.decode(std::vector<Index>{1, 8}) == "cat \uFFFD");
  CHECK(t.token_label(7) == "xiaoming's");
  CHECK(t.token_label(8) == "<unk>");
  CHECK(error_of([&] { t.encode(std::string_view("the dog and the dog"), false, "--text"); }) ==
        "--text: 2 words are not in the vocabulary (of 8 words): 'dog', 'and'");
  CHECK(error_of([] { Tokenizer::words({"a b"}); }) == "Tokenizer::words: word 0 ('a b') holds whitespace");
  CHECK(error_of([] { Tokenizer::words({"a", ""}); }) == "Tokenizer::words: word 1 is empty");
}

TEST_CASE("text: a word vocabulary is stored as code points joined by newlines and read back") {
  const Tokenizer t = Tokenizer::words({"我", "cat", "é"});
  const std::vector<std::uint32_t> v = t.to_vocab();
  CHECK(v == std::vector<std::uint32_t>{'c', 'a', 't', '\n', 0xE9, '\n', 0x6211});
  CHECK(words_from_vocab(v) == t.word_list());
  const Tokenizer r = Tokenizer::from_vocab(TokenizerKind::Word, v);
  CHECK(r.word_list() == t.word_list());
  auto err = [](std::vector<std::uint32_t> v) { return error_of([&] { Tokenizer::from_vocab(TokenizerKind::Word, v); }); };
  CHECK(err({}) == "tokenizer vocabulary (word): expected at least one word, found none");
  CHECK(err({'b', '\n', 'a'}) ==
        "tokenizer vocabulary (word): expected words in increasing byte order, found 'a' at position 1 after 'b'");
  CHECK(err({'a', '\n', 'a'}) == "tokenizer vocabulary (word): 'a' at position 1 is a duplicate");
  CHECK(err({'a', '\n', '\n', 'b'}) == "tokenizer vocabulary (word): word at position 1 is empty");
  CHECK(err({'a', ' ', 'b'}) == "tokenizer vocabulary (word): word 'a b' at position 0 holds whitespace");
  CHECK(err({'a', 0xD800}) == "tokenizer vocabulary (word): code point U+D800 at position 1 is not a Unicode scalar value");
}

TEST_CASE("text: decode and token_label reject ids outside the vocabulary") {
  const Tokenizer t = Tokenizer::chars(u32("ab"));
  const std::vector<Index> bad = {0, 3};
  CHECK(error_of([&] { t.decode(bad); }) == "Tokenizer::decode: id 3 at position 1 is outside [0, 3)");
  const std::vector<Index> negative = {-1};
  CHECK(error_of([&] { Tokenizer::bytes().decode(negative); }) ==
        "Tokenizer::decode: id -1 at position 0 is outside [0, 256)");
  CHECK(error_of([&] { t.token_label(3); }) == "Tokenizer::token_label: id 3 is outside [0, 3)");
}

TEST_CASE("text: token labels are printable") {
  const Tokenizer t = Tokenizer::chars(u32(" \n\t\ra我\xE3\x80\x80\x7F\xC2\xA0"));  // U+3000, DEL, NBSP
  std::vector<std::string> labels;
  for (Index i = 0; i < Index(t.size()); ++i) labels.push_back(t.token_label(i));
  CHECK(labels == std::vector<std::string>{"\\t", "\\n", "\\r", "\xE2\x90\xA0", "a", "U+007F", "U+00A0", "U+3000",
                                           "我", "<unk>"});
  const Tokenizer b = Tokenizer::bytes();
  CHECK(b.token_label('a') == "a");
  CHECK(b.token_label(' ') == "\xE2\x90\xA0");
  CHECK(b.token_label('\n') == "\\n");
  CHECK(b.token_label(0) == "\\x00");
  CHECK(b.token_label(0xE6) == "\\xE6");
  CHECK(b.token_label(0x7F) == "\\x7F");
}

TEST_CASE("text: a byte is labelled by one rule, as its ASCII character or else as its hex code") {
  // The rule (text.hpp, docs/text.md): 0x20-0x7E and the newline, tab and carriage return get the
  // label a char tokenizer gives that character (a space "␠", a newline "\n"); every other byte
  // "\xNN" with uppercase hex digits.
  const Tokenizer b = Tokenizer::bytes();
  for (int v = 0; v < 256; ++v) {
    CAPTURE(v);
    const bool shown = (v >= 0x20 && v < 0x7F) || v == '\n' || v == '\t' || v == '\r';
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02X", unsigned(v));
    std::string expected = hex;
    if (shown) {
      const char32_t c = char32_t(v);
      const Tokenizer one = Tokenizer::chars(std::u32string(1, c));
      expected = one.token_label(0);  // the char tokenizer's label of the same character
    }
    CHECK(b.token_label(v) == expected);
  }
  CHECK(b.token_label(' ') == "\xE2\x90\xA0");
  CHECK(b.token_label('\t') == "\\t");
  CHECK(b.token_label('\r') == "\\r");
  CHECK(b.token_label(0x0B) == "\\x0B");
  CHECK(b.token_label(0x1F) == "\\x1F");
  CHECK(b.token_label('~') == "~");
  CHECK(b.token_label(0x80) == "\\x80");
}

TEST_CASE("text: tokenizer and cleaning names parse and list the choices") {
  CHECK(parse_tokenizer("byte") == TokenizerKind::Byte);
  CHECK(parse_tokenizer("char") == TokenizerKind::Char);
  CHECK(std::string(name(TokenizerKind::Char)) == "char");
  CHECK(parse_tokenizer("word") == TokenizerKind::Word);
  CHECK(error_of([] { parse_tokenizer("bpe"); }).rfind("task.tokenizer: expected one of byte, char, word, found 'bpe'", 0) == 0);
  for (TextClean c : {TextClean::Auto, TextClean::On, TextClean::Off}) CHECK(parse_text_clean(name(c)) == c);
  CHECK(error_of([] { parse_text_clean("yes"); }).rfind("task.clean: expected one of auto, on, off, found 'yes'", 0) == 0);
}

// ---------------------------------------------------------------------------------------------
// UTF-8

TEST_CASE("text: decode_utf8 accepts the boundaries of every sequence length") {
  const std::u32string edges = {0x0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF};
  const std::string bytes = encode_utf8(edges);
  CHECK(bytes == std::string("\x00\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBD\xEF\xBF\xBF"
                             "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF", 29));
  CHECK(decode_utf8(bytes, "edges") == edges);
}

TEST_CASE("text: decode_utf8 rejects overlong forms") {
  CHECK(decode_error("ab\xC0\xAF") ==
        "F: not valid UTF-8 at byte 2, line 1 (0xC0 0xAF): overlong encoding (0xC0 and 0xC1 only start overlong forms of ASCII)");
  CHECK(decode_error("x\n\xE0\x80\xAF") == "F: not valid UTF-8 at byte 2, line 2 (0xE0 0x80 0xAF): overlong encoding");
  CHECK(decode_error("\xF0\x80\x80\xAF") == "F: not valid UTF-8 at byte 0, line 1 (0xF0 0x80 0x80 0xAF): overlong encoding");
}

TEST_CASE("text: decode_utf8 rejects UTF-16 surrogates") {
  CHECK(decode_error("ok \xED\xA0\x80") == "F: not valid UTF-8 at byte 3, line 1 (0xED 0xA0 0x80): UTF-16 surrogate (U+D800-U+DFFF)");
  CHECK(decode_error("\xED\xBF\xBF") == "F: not valid UTF-8 at byte 0, line 1 (0xED 0xBF 0xBF): UTF-16 surrogate (U+D800-U+DFFF)");
}

TEST_CASE("text: decode_utf8 rejects code points above U+10FFFF") {
  CHECK(decode_error("\xF4\x90\x80\x80") == "F: not valid UTF-8 at byte 0, line 1 (0xF4 0x90 0x80 0x80): code point above U+10FFFF");
  CHECK(decode_error("a\xF5\x80\x80\x80") == "F: not valid UTF-8 at byte 1, line 1 (0xF5): code point above U+10FFFF");
  CHECK(decode_error("a\xFF") == "F: not valid UTF-8 at byte 1, line 1 (0xFF): byte never used in UTF-8");
}

TEST_CASE("text: decode_utf8 rejects sequences truncated at the end") {
  CHECK(decode_error("abc\xE6\x88") ==
        "F: not valid UTF-8 at byte 3, line 1 (0xE6 0x88): truncated sequence: the text ends 1 byte short of a 3-byte sequence");
  CHECK(decode_error("\n\n\xF0") ==
        "F: not valid UTF-8 at byte 2, line 3 (0xF0): truncated sequence: the text ends 3 bytes short of a 4-byte sequence");
}

TEST_CASE("text: decode_utf8 rejects stray and missing continuation bytes") {
  CHECK(decode_error("a\x80") == "F: not valid UTF-8 at byte 1, line 1 (0x80): unexpected continuation byte (no lead byte before it)");
  CHECK(decode_error("\xC3\xA9\xA9") ==  // é then a continuation byte too many
        "F: not valid UTF-8 at byte 2, line 1 (0xA9): unexpected continuation byte (no lead byte before it)");
  CHECK(decode_error("\xC3\x28") == "F: not valid UTF-8 at byte 0, line 1 (0xC3 0x28): invalid continuation byte");
  CHECK(decode_error("\xE6\x88z") == "F: not valid UTF-8 at byte 0, line 1 (0xE6 0x88 0x7A): invalid continuation byte");
}

TEST_CASE("text: encode_utf8 rejects values that are not Unicode scalar values") {
  CHECK(error_of([] { encode_utf8(std::u32string{'a', 0xDC00}); }) ==
        "encode_utf8: U+DC00 at position 1 is not a Unicode scalar value (a surrogate or above U+10FFFF)");
  CHECK(error_of([] { encode_utf8(std::u32string{0x110000}); }).find("U+110000 at position 0") != std::string::npos);
  CHECK(error_of([] { Tokenizer::chars(std::u32string{'a', 0xD800}); }) ==
        "Tokenizer::chars: U+D800 at position 1 is not a Unicode scalar value");
}

TEST_CASE("text: a UTF-8 error in the second file names it with the offset in that file") {
  const std::string dir = test::temp_dir("text_utf8_second_file");
  write(dir + "/a.txt", std::string(100, 'a') + "\n");
  // Escapes before the bad byte: the offset is in the file as stored, not in the cleaned text.
  write(dir + "/b.txt", "\x1b[32mT\x1b[m\nok \xC0\xAF\n");
  const std::string msg = error_of([&] { load_text_data(dir, TokenizerKind::Char, TextClean::Auto, 0.1, 0.0, 1); });
  CHECK(msg == dir + "/b.txt: not valid UTF-8 at byte 13, line 2 (0xC0 0xAF): overlong encoding (0xC0 and 0xC1 only "
                     "start overlong forms of ASCII); use task.tokenizer: byte for non-UTF-8 text");
  // The byte tokenizer takes any bytes.
  const TextData d = load_text_data(dir, TokenizerKind::Byte, TextClean::Auto, 0.1, 0.0, 1);
  CHECK(d.tokens == 101 + 8);
}

// ---------------------------------------------------------------------------------------------
// Cleaning

TEST_CASE("text: clean_text removes the colour codes around a fortunes-zh title") {
  const std::string raw = "\x1b[32m静夜思\x1b[m\n\x1b[1;33m李白\x1b[0m\n床前明月光，疑是地上霜。\n%\n";
  CHECK(needs_cleaning(raw));
  CHECK(clean_text(raw) == "静夜思\n李白\n床前明月光，疑是地上霜。\n\n");
}

TEST_CASE("text: clean_text turns fortune separator lines into empty lines") {
  CHECK(clean_text("a\n%\nb\n% \t\r\nc") == "a\n\nb\n\nc");
  CHECK(clean_text("%\n%") == "\n");
  // Not separators: more than one '%', a leading space, other text on the line.
  const std::string kept = "%%\n %\nc%\n% x\n100%\n";
  CHECK_FALSE(needs_cleaning(kept));
  CHECK(clean_text(kept) == kept);
}

TEST_CASE("text: clean_text keeps CRLF and leaves text without escapes unchanged") {
  CHECK(clean_text("one\r\ntwo\r\n%\r\nthree\r\n") == "one\r\ntwo\r\n\nthree\r\n");
  const std::string plain = "Plain text, 中文, émoji 😀,\r\nand [brackets] 50% off.\n";
  CHECK_FALSE(needs_cleaning(plain));
  CHECK(clean_text(plain) == plain);
  CHECK(clean_text("") == "");
}

TEST_CASE("text: clean_text removes other and cut-short escape sequences") {
  CHECK(clean_text("a\x1b(Bb\x1b" "7c\x1b=d") == "abcd");  // charset, save cursor, keypad
  CHECK(clean_text("a\x1b[1;31\nb") == "a\nb");            // CSI cut short by a newline: the newline stays
  CHECK(clean_text("a\x1b[?25hb\x1b[2 qc") == "abc");      // private parameters, an intermediate byte
  CHECK(clean_text("end\x1b") == "end");                   // a lone trailing ESC
  CHECK(clean_text("\x1b\x1b[m\x1b\n") == "\n");           // ESC ESC: the first is alone
  CHECK(clean_text("\x1b我") == "我");                      // never a byte of a UTF-8 sequence
  CHECK(clean_text("\x1b[1m%\x1b[0m\nx") == "\nx");        // a highlighted separator
}

TEST_CASE("text: needs_cleaning is true exactly when clean_text changes the text") {
  const char alphabet[] = {'\x1b', '[', '(', '%', ' ', '\r', '\n', 'a', '1', 'm'};
  Generator gen(5);
  int changed = 0;
  for (int k = 0; k < 20000; ++k) {
    std::string s;
    const std::size_t len = gen.randint(10);
    for (std::size_t i = 0; i < len; ++i) s += alphabet[gen.randint(std::size(alphabet))];
    const bool differs = clean_text(s) != s;
    changed += differs;
    if (needs_cleaning(s) != differs) {
      CAPTURE(s);
      FAIL_CHECK("needs_cleaning disagrees with clean_text");
    }
  }
  CHECK(changed > 1000);
  CHECK(changed < 19000);
}

TEST_CASE("text: Auto cleans the files that need it, On and Off do as told") {
  const std::string dir = test::temp_dir("text_clean_modes");
  write(dir + "/a", "one\n%\ntwo\n");
  write(dir + "/b", "plain\n");
  const Corpus autod = load_corpus(dir, TextClean::Auto), on = load_corpus(dir, TextClean::On),
               off = load_corpus(dir, TextClean::Off);
  CHECK(autod.text == "one\n\ntwo\nplain\n");
  CHECK(on.text == autod.text);
  CHECK(off.text == "one\n%\ntwo\nplain\n");
  CHECK(autod.cleaned);
  CHECK(on.cleaned);
  CHECK_FALSE(off.cleaned);
  const Corpus plain = load_corpus(dir + "/b", TextClean::Auto);
  CHECK(plain.text == "plain\n");
  CHECK_FALSE(plain.cleaned);
  CHECK(load_corpus(dir + "/b", TextClean::On).cleaned);
}

// ---------------------------------------------------------------------------------------------
// Files

TEST_CASE("text: corpus_files takes a single file, following a link named directly") {
  const std::string dir = test::temp_dir("text_files_single");
  write(dir + "/one.txt", "x");
  fs::create_symlink(dir + "/one.txt", dir + "/link.u8");
  CHECK(corpus_files(dir + "/one.txt") == std::vector<std::string>{dir + "/one.txt"});
  CHECK(corpus_files(dir + "/link.u8") == std::vector<std::string>{dir + "/link.u8"});
  write(dir + "/index.dat", "named directly, a .dat text file is read");
  CHECK(corpus_files(dir + "/index.dat").size() == 1);
}

TEST_CASE("text: corpus_files walks a directory recursively in byte order") {
  const std::string dir = test::temp_dir("text_files_walk");
  for (const char* f : {"b", "a/z", "A", "a/b/c", "\xC3\xA9", "a.txt", "_"}) write(dir + "/" + f, "text\n");
  // '.' (0x2E) sorts before '/' (0x2F), and é (0xC3 0xA9) after every ASCII name.
  const std::vector<std::string> expected = {dir + "/A", dir + "/_", dir + "/a.txt", dir + "/a/b/c",
                                             dir + "/a/z", dir + "/b", dir + "/\xC3\xA9"};
  CHECK(corpus_files(dir) == expected);
  CHECK(corpus_files(dir + "/") == expected);
}

TEST_CASE("text: corpus_files expands glob patterns and braces") {
  const std::string dir = test::temp_dir("text_files_glob");
  for (const char* f : {"art", "chinese", "tang300", "tang300.dat", "sub/x", "zz.txt"}) write(dir + "/" + f, "poem\n");
  CHECK(corpus_files(dir + "/*") == std::vector<std::string>{dir + "/art", dir + "/chinese", dir + "/sub/x",
                                                            dir + "/tang300", dir + "/zz.txt"});
  CHECK(corpus_files(dir + "/{tang300,chinese}") == std::vector<std::string>{dir + "/chinese", dir + "/tang300"});
  CHECK(corpus_files(dir + "/[a-c]*") == std::vector<std::string>{dir + "/art", dir + "/chinese"});
  CHECK(corpus_files(dir + "/{art,art,a?t}") == std::vector<std::string>{dir + "/art"});  // each once
  // A brace list longer than a file name may be (stat fails with ENAMETOOLONG) is still a pattern.
  std::string names = "art";
  for (int i = 0; i < 40; ++i) names += ",not-installed-" + std::to_string(i);
  CHECK(corpus_files(dir + "/{" + names + "}") == std::vector<std::string>{dir + "/art"});
}

TEST_CASE("text: corpus_files skips .dat files, links, hidden and binary files") {
  const std::string dir = test::temp_dir("text_files_skip");
  write(dir + "/fortunes", "a\n%\nb\n");
  write(dir + "/fortunes.dat", std::string("\x00\x00\x00\x02", 4));
  write(dir + "/text.dat", "a .dat name is skipped even when it holds text");
  fs::create_symlink(dir + "/fortunes", dir + "/fortunes.u8");
  fs::create_directories(dir + "/linked");
  fs::create_directory_symlink(dir + "/linked", dir + "/dirlink");
  write(dir + "/.git/config", "[core]\n");
  write(dir + "/.hidden", "h\n");
  write(dir + "/image", std::string("GIF89a\x00\x01", 8));
  write(dir + "/nested/poem", "p\n");
  CHECK(corpus_files(dir) == std::vector<std::string>{dir + "/fortunes", dir + "/nested/poem"});
  CHECK(corpus_files(dir + "/*") == std::vector<std::string>{dir + "/fortunes", dir + "/nested/poem"});
}

TEST_CASE("text: corpus_files error messages") {
  const std::string dir = test::temp_dir("text_files_errors");
  CHECK(error_of([&] { corpus_files(dir + "/missing"); }) == "task.path: no such file or directory: " + dir + "/missing");
  CHECK(error_of([&] { corpus_files(""); }) ==
        "task.path: expected a file, a directory or a glob pattern, found an empty string");
  CHECK(error_of([&] { corpus_files(dir + "/*.txt"); }) == "task.path: " + dir + "/*.txt matches no files");
  CHECK(error_of([&] { corpus_files(dir); }) == "task.path: directory " + dir + " has no text files (it holds no files)");
  write(dir + "/a.dat", "x");
  write(dir + "/bin", std::string("ab\x00", 3));
  fs::create_symlink(dir + "/bin", dir + "/bin.u8");
  CHECK(error_of([&] { corpus_files(dir); }) == "task.path: directory " + dir + " has no text files (skipped 3: " + dir +
                                                    "/a.dat (fortune index .dat), " + dir +
                                                    "/bin (binary: NUL byte at byte 2), " + dir + "/bin.u8 (symbolic link))");
  CHECK(error_of([&] { corpus_files(dir + "/b*"); }) == "task.path: " + dir + "/b* matches no text files (skipped 2: " +
                                                           dir + "/bin (binary: NUL byte at byte 2), " + dir +
                                                           "/bin.u8 (symbolic link))");
  CHECK(error_of([&] { corpus_files(dir + "/bin"); }) == "task.path: " + dir + "/bin is not a text file (NUL byte at byte 2)");
  for (int i = 0; i < 10; ++i) write(dir + "/more/" + std::to_string(i) + ".dat", "x");
  CHECK(error_of([&] { corpus_files(dir + "/more"); }).find(", and 2 more)") != std::string::npos);
}

TEST_CASE("text: load_corpus joins files with newlines and records where each starts") {
  const std::string dir = test::temp_dir("text_load_join");
  write(dir + "/a", "x");
  write(dir + "/b", "");
  write(dir + "/c", "y\n");
  write(dir + "/d", "\r\nz");
  const Corpus c = load_corpus(dir);
  CHECK(c.path == dir);
  CHECK(c.text == "x\ny\n\r\nz\n");
  CHECK(c.files == std::vector<std::string>{dir + "/a", dir + "/c", dir + "/d"});
  CHECK(c.file_starts == std::vector<std::size_t>{0, 2, 4});
  CHECK_FALSE(c.cleaned);
}

TEST_CASE("text: find_in_corpus locates a text in its file as stored, past what cleaning removed") {
  const std::string dir = test::temp_dir("text_find");
  write(dir + "/a", "hello\n");
  write(dir + "/b", "\x1b[1mtitle\x1b[0m\nsay [MASK] here\n");
  write(dir + "/c", "x\x1b[MASK] y [MASK]\n");  // cleaning removes ESC [ M: only the second is in the text
  const Corpus c = load_corpus(dir);
  REQUIRE(c.cleaned);
  const std::optional<TextPlace> p = find_in_corpus(c, "[MASK]");
  REQUIRE(p.has_value());
  CHECK(p->file == dir + "/b");
  CHECK(p->byte == 18);
  CHECK(p->line == 2);
  CHECK_FALSE(p->cleaned);
  const std::optional<TextPlace> q = find_in_corpus(load_corpus(dir + "/c"), "[MASK]");
  REQUIRE(q.has_value());
  CHECK(q->byte == 11);
  CHECK_FALSE(find_in_corpus(c, "[UNK]").has_value());
}

TEST_CASE("text: an empty corpus is an error naming the path") {
  const std::string dir = test::temp_dir("text_load_empty");
  write(dir + "/a", "");
  write(dir + "/b", "");
  CHECK(error_of([&] { load_corpus(dir); }) == "task.path: corpus " + dir + " has no text: its 2 files are empty");
  write(dir + "/c", "\x1b[0m");
  CHECK(error_of([&] { load_corpus(dir + "/c"); }) ==
        "task.path: corpus " + dir + "/c has no text: its 1 file is empty after cleaning");
  CHECK(load_corpus(dir + "/c", TextClean::Off).text == "\x1b[0m\n");
}

// ---------------------------------------------------------------------------------------------
// Split and pipeline

TEST_CASE("text: split_text is contiguous, disjoint and covers everything") {
  for (std::size_t n = 0; n < 300; ++n)
    for (double v : {0.0, 0.05, 0.1, 0.3})
      for (double t : {0.0, 0.1, 0.25}) {
        const TextSplit s = split_text(n, v, t);
        CHECK(s.train_begin == 0);
        CHECK(s.train_end == s.val_begin);
        CHECK(s.val_end == s.test_begin);
        CHECK(s.test_end == n);
        CHECK(s.train_begin <= s.train_end);
        CHECK(s.val_begin <= s.val_end);
        CHECK(s.test_begin <= s.test_end);
        CHECK(s.val_end - s.val_begin == std::size_t(std::floor(double(n) * v + 1e-9)));
        CHECK(s.test_end - s.test_begin == std::size_t(std::floor(double(n) * t + 1e-9)));
      }
}

TEST_CASE("text: split_text follows the floor rule exactly") {
  auto sizes = [](std::size_t n, double v, double t) {
    const TextSplit s = split_text(n, v, t);
    return std::vector<std::size_t>{s.train_end - s.train_begin, s.val_end - s.val_begin, s.test_end - s.test_begin};
  };
  CHECK(sizes(1000, 0.1, 0.1) == std::vector<std::size_t>{800, 100, 100});
  CHECK(sizes(1009, 0.1, 0.1) == std::vector<std::size_t>{809, 100, 100});
  CHECK(sizes(29, 0.1, 0.0) == std::vector<std::size_t>{27, 2, 0});
  CHECK(sizes(100, 0.29, 0.0) == std::vector<std::size_t>{71, 29, 0});  // 100 * 0.29 = 28.999999999999996 in double
  CHECK(sizes(10, 0.3, 0.3) == std::vector<std::size_t>{4, 3, 3});
  CHECK(sizes(7, 0.0, 0.0) == std::vector<std::size_t>{7, 0, 0});
  CHECK(sizes(2583, 0.05, 0.0) == std::vector<std::size_t>{2454, 129, 0});
}

TEST_CASE("text: split_text rejects bad fractions") {
  CHECK(error_of([] { split_text(10, -0.1, 0); }) == "task.val_fraction: expected a number in [0, 1), found -0.1");
  CHECK(error_of([] { split_text(10, 0, 1.0); }) == "task.test_fraction: expected a number in [0, 1), found 1");
  CHECK(error_of([] { split_text(10, std::nan(""), 0); }) == "task.val_fraction: expected a number in [0, 1), found nan");
  CHECK(error_of([] { split_text(10, 0.5, 0.5); }) ==
        "task.val_fraction + task.test_fraction: expected less than 1 (the rest trains), found 0.5 + 0.5 = 1");
  CHECK(error_of([] { split_text(10, 0.6, 0.5); }).find("found 0.6 + 0.5 = 1.1") != std::string::npos);
}

TEST_CASE("text: a split shorter than one window is an error naming it") {
  const std::string dir = test::temp_dir("text_split_short");
  write(dir + "/c.txt", std::string(999, 'a') + "\n");  // 1000 tokens
  auto err = [&](double v, double t, std::size_t m) {
    return error_of([&] { load_text_data(dir, TokenizerKind::Char, TextClean::Auto, v, t, m); });
  };
  CHECK(err(0.037, 0.0, 129) == "task: the validation split has 37 tokens, fewer than one window of task.length + 1 = 129 "
                                "(corpus " + dir + " has 1000 tokens; lower task.length or raise task.val_fraction)");
  CHECK(err(0.2, 0.01, 129) == "task: the test split has 10 tokens, fewer than one window of task.length + 1 = 129 "
                               "(corpus " + dir + " has 1000 tokens; lower task.length or raise task.test_fraction)");
  CHECK(err(0.5, 0.4, 129) == "task: the training split has 100 tokens, fewer than one window of task.length + 1 = 129 "
                              "(corpus " + dir + " has 1000 tokens; lower task.length or lower task.val_fraction and "
                              "task.test_fraction)");
  CHECK(err(0.0, 0.0, 1001) == "task: the training split has 1000 tokens, fewer than one window of task.length + 1 = "
                               "1001 (corpus " + dir + " has 1000 tokens; lower task.length or use a larger corpus)");
  CHECK(err(0.2, 0.0, 129) == "");  // no test split asked for: none needed
  CHECK(err(0.129, 0.0, 129) == "");
}

TEST_CASE("text: load_text_data builds the char vocabulary from the training split only") {
  const std::string dir = test::temp_dir("text_vocab_train_only");
  // 40 'b', 39 'a', '\n' | 10 Chinese characters, '\n': 91 tokens, split 73 | 9 | 9, so the
  // training split is 40 'b' and 33 'a'; validation 6 'a', '\n', 我, 爱; test 吃苹果猫喜欢追逐 '\n'.
  write(dir + "/a", std::string(40, 'b') + std::string(39, 'a') + "\n");
  write(dir + "/b", "我爱吃苹果猫喜欢追逐");
  const TextData d = load_text_data(dir, TokenizerKind::Char, TextClean::Auto, 0.1, 0.1, 1);
  CHECK(d.tokens == 91);
  CHECK(d.tokenizer.to_vocab() == std::vector<std::uint32_t>{'a', 'b'});
  CHECK(d.train.size() == 73);
  CHECK(d.val.size() == 9);
  CHECK(d.test.size() == 9);
  const Index unk = d.tokenizer.unk();
  CHECK(unk == 2);
  CHECK(std::count(d.train.begin(), d.train.end(), unk) == 0);
  CHECK(d.val == std::vector<Index>{0, 0, 0, 0, 0, 0, unk, unk, unk});
  CHECK(std::count(d.test.begin(), d.test.end(), unk) == 9);
  CHECK(d.tokenizer.decode(d.val) == "aaaaaa\uFFFD\uFFFD\uFFFD");
}

TEST_CASE("text: load_text_data makes a Chinese character one token") {
  const std::string dir = test::temp_dir("text_chinese_tokens");
  write(dir + "/tang300", "\x1b[32m静夜思\x1b[m\n床前明月光\n%\n");
  const TextData c = load_text_data(dir, TokenizerKind::Char, TextClean::Auto, 0.0, 0.0, 1);
  CHECK(c.corpus.text == "静夜思\n床前明月光\n\n");
  CHECK(c.tokens == 11);
  CHECK(c.train.size() == 11);
  CHECK(c.tokenizer.decode(c.train) == c.corpus.text);
  const TextData b = load_text_data(dir, TokenizerKind::Byte, TextClean::Auto, 0.0, 0.0, 1);
  CHECK(b.tokens == 3 * 8 + 3);
  CHECK(b.tokenizer.decode(b.train) == c.corpus.text);
}

TEST_CASE("text: load_text_data is deterministic on a 200 KB mixed text") {
  const std::string dir = test::temp_dir("text_determinism");
  std::string all;
  for (int f = 0; f < 3; ++f) {
    const std::string s = mixed_text(70000, std::uint64_t(f) + 1);
    write(dir + "/part" + std::to_string(f), s);
    all += s + (s.back() == '\n' ? "" : "\n");
  }
  for (TokenizerKind kind : {TokenizerKind::Char, TokenizerKind::Byte}) {
    CAPTURE(name(kind));
    const TextData a = load_text_data(dir, kind, TextClean::Auto, 0.05, 0.05, 129);
    const TextData b = load_text_data(dir, kind, TextClean::Auto, 0.05, 0.05, 129);
    CHECK(a.train == b.train);
    CHECK(a.val == b.val);
    CHECK(a.test == b.test);
    CHECK(a.tokenizer.to_vocab() == b.tokenizer.to_vocab());
    CHECK(a.corpus.text == clean_text(all));
    CHECK(a.tokens == a.train.size() + a.val.size() + a.test.size());
    // Every character occurs in the training split, so the three splits decode to the text.
    CHECK(a.tokenizer.decode(a.train) + a.tokenizer.decode(a.val) + a.tokenizer.decode(a.test) == a.corpus.text);
    if (kind == TokenizerKind::Char) CHECK(a.tokenizer.size() == 46 + 1);  // no '%': cleaned away
  }
}

TEST_CASE("text: encoding a megabyte of mixed text round-trips") {
  // Linear by design: the vocabulary is a presence bit per code point, encoding a binary search.
  const std::string s = mixed_text(1 << 20, 9);
  const std::u32string cps = decode_utf8(s, "mixed");
  const Tokenizer t = Tokenizer::chars(cps);
  const std::vector<Index> ids = t.encode(std::string_view(s), false, "mixed");
  CHECK(ids.size() == cps.size());
  CHECK(t.decode(ids) == s);
  CHECK(encode_utf8(cps) == s);
  CHECK(clean_text(s).size() < s.size());
}
