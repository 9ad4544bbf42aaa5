#pragma once
/// @file
/// Text corpora for byte- and character-level language models: finding and reading the files,
/// cleaning them (ANSI escapes, fortune separators), strict UTF-8, tokenizers and the split.
/// docs/text.md states every rule exactly.
///
/// The pipeline of a run (load_text_data):
///   files = corpus_files(path)              sorted, .dat / links / binary / hidden skipped
///   text  = clean(file 1) "\n" clean(file 2) "\n" ...     (no "\n" added after one that has it)
///   tokens = bytes of text (Byte) or its code points (Char; every file strict UTF-8)
///   [0, n_train) [n_train, n_train + n_val) [n_train + n_val, n) = train, val, test
///   Char vocabulary = the code points of the training split, plus <unk>.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/tensor/names.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::data {

/// How to clean a corpus. Auto: clean the files that need it (needs_cleaning) and leave the
/// others as read; since clean_text changes nothing in a file that does not need it, Auto and On
/// give the same text and differ only in Corpus::cleaned. Off: the bytes as read.
enum class TextClean { Auto, On, Off };

/// "auto" / "on" / "off".
/// The names configs use: "auto", "on", "off".
const NameTable<TextClean>& text_clean_names();
const char* name(TextClean clean);
/// The TextClean named `s`; throws ValueError "task.clean: expected one of auto, on, off, found 'x'".
TextClean parse_text_clean(const std::string& s);

/// The files of a corpus path, sorted by path (byte order), each once:
///   a file                the file itself (a link named directly is followed);
///   a directory           every regular file below it, recursively;
///   a glob(3) pattern     (when `path` does not exist and holds one of * ? [ {) its matches,
///                         each a file or a directory as above; braces {a,b} are expanded.
/// Skipped while expanding a directory or a pattern: names ending in ".dat" (fortune index
/// files), symbolic links (Debian's fortunes ships `*.u8` links to the same files: counted once)
/// and anything not a regular file; inside a directory also names starting with "." (hidden,
/// e.g. .git, as a shell's `*` does). Skipped always: files holding a NUL byte (binary).
/// Throws ValueError: "task.path: no such file or directory: P", "task.path: P matches no files",
/// "task.path: directory P has no text files (skipped N: F (reason), ...)", "task.path: P matches
/// no text files (skipped N: ...)", "task.path: P is not a text file (NUL byte at byte K)".
std::vector<std::string> corpus_files(const std::string& path);

/// A corpus read into memory.
struct Corpus {
  std::string path;                      ///< the corpus path as given
  std::string text;                      ///< the cleaned bytes, files joined in order
  std::vector<std::string> files;        ///< the files whose text is in `text`, in order
  std::vector<std::size_t> file_starts;  ///< byte offset in `text` where each file's text starts
  bool cleaned = false;                  ///< whether clean_text ran on at least one file
};

/// Read the files of corpus_files(path) in order and join them: each file's (cleaned) text,
/// followed by "\n" unless it already ends in one. A file empty after cleaning adds nothing and
/// is not listed in `files`. With `require_utf8`, each file's bytes as stored are checked to be
/// strict UTF-8 first (see decode_utf8; the error names the file and the byte offset in it).
/// Throws ValueError (corpus_files' errors, "task.path: cannot read F: reason", and
/// "task.path: corpus P has no text: its N files are empty after cleaning").
Corpus load_corpus(const std::string& path, TextClean clean = TextClean::Auto, bool require_utf8 = false);

/// Cleaning. Removed: ANSI escape sequences, all of them ASCII:
///   CSI   ESC '[' parameter bytes (0x30-0x3F)* intermediate bytes (0x20-0x2F)* final (0x40-0x7E)
///         (a CSI cut short by any other byte or by the end loses what it had; that byte stays);
///   other ESC intermediate bytes (0x20-0x2F)* final byte (0x30-0x7E), e.g. ESC ( B, ESC 7;
///   an ESC followed by anything else (or nothing) is removed alone.
/// Then a line holding only "%" followed by nothing but spaces, tabs and '\r' (the fortune
/// separator) becomes an empty line: its bytes go, its '\n' stays. Nothing else changes, so valid
/// UTF-8 stays valid UTF-8. O(n).
std::string clean_text(std::string_view text);
/// True when clean_text(text) != text (what TextClean::Auto asks). O(n), no allocation.
bool needs_cleaning(std::string_view text);

/// Strict UTF-8 (RFC 3629) -> code points: no overlong forms, no surrogates (U+D800-U+DFFF),
/// nothing above U+10FFFF, no stray continuation bytes, no truncated sequences. Throws
/// ValueError naming `where`, the byte offset of the bad sequence's first byte and its line,
/// the bytes, and the rule:
///   "F: not valid UTF-8 at byte 1234, line 56 (0xC3 0x28): invalid continuation byte".
std::u32string decode_utf8(std::string_view bytes, const std::string& where);
/// Code points -> UTF-8. Throws ValueError on a surrogate or a value above U+10FFFF.
std::string encode_utf8(std::u32string_view text);

/// Byte and Char read corpora; Word is the English grammar's (a vocabulary of whole words).
enum class TokenizerKind { Byte, Char, Word };

/// The names configs use: "byte", "char", "word".
const NameTable<TokenizerKind>& tokenizer_names();
const char* name(TokenizerKind kind);
/// The TokenizerKind named `s`; throws ValueError "task.tokenizer: expected one of byte, char, word, found 'x'".
TokenizerKind parse_tokenizer(const std::string& s);

/// A tokenizer and its vocabulary (V = size()), small enough to store in a checkpoint.
///   Byte: V = 256, id = byte value; decode is exact for any bytes.
///   Char: ids 0..V-2 are the code points of the training text in increasing order; id V-1 is
///         <unk> (a code point absent from the training text), decoded as U+FFFD. A character is
///         one token whatever its UTF-8 length (a Chinese character, an emoji).
///   Word: ids 0..V-2 are words (non-empty UTF-8 without whitespace) in increasing byte order;
///         id V-1 is <unk>. Text is split at ASCII whitespace; decode joins words with one space.
/// Encoding is O(n log V).
class Tokenizer {
 public:
  /// The byte tokenizer (V = 256).
  static Tokenizer bytes();
  /// The char tokenizer whose vocabulary is the distinct code points of `training_text`.
  /// Throws ValueError on an empty text or a code point that is not a Unicode scalar value.
  static Tokenizer chars(std::u32string_view training_text);
  /// The word tokenizer of the distinct `words` (any order, repeats allowed). Throws ValueError on
  /// no words, an empty word, a word holding whitespace or invalid UTF-8.
  static Tokenizer words(std::vector<std::string> words);
  /// Rebuild from kind() and to_vocab() (checkpoints). Throws ValueError naming the problem on a
  /// malformed vocabulary: Byte with code points; Char empty, not strictly increasing (unsorted
  /// or duplicate), a surrogate or a value above U+10FFFF; Word as words_from_vocab.
  static Tokenizer from_vocab(TokenizerKind kind, const std::vector<std::uint32_t>& code_points);

  TokenizerKind kind() const { return kind_; }
  /// V: 256 for Byte; the code points (Char) or words (Word) plus one (<unk>).
  std::size_t size() const { return kind_ == TokenizerKind::Byte ? 256 : entries() + 1; }
  /// The <unk> id V-1 (Char, Word); -1 for Byte, which has none.
  Index unk() const { return kind_ == TokenizerKind::Byte ? -1 : Index(entries()); }
  /// What a checkpoint stores (uint32 code points): Char the code points of ids 0..V-2; Word
  /// words_to_vocab of its words; empty for Byte.
  std::vector<std::uint32_t> to_vocab() const;
  /// Word: the words of ids 0..V-2; empty otherwise.
  const std::vector<std::string>& word_list() const { return words_; }

  /// Text -> ids: Byte takes any bytes; Char decodes strict UTF-8 (errors name `what`); Word
  /// splits at ASCII whitespace. A character (word) outside the vocabulary becomes <unk> when
  /// allow_unknown, else throws ValueError naming `what` and listing the distinct unknown
  /// characters ('é' U+00E9, ...) or words ('xyz', ...).
  std::vector<Index> encode(std::string_view text, bool allow_unknown, const std::string& what) const;
  /// Code points -> ids (Byte: the ids of their UTF-8 bytes; Word: of their words).
  std::vector<Index> encode(std::u32string_view text, bool allow_unknown, const std::string& what) const;
  /// ids -> text (UTF-8 for Char, <unk> as U+FFFD; Word: the words joined by spaces). Throws
  /// ValueError on an id outside [0, V).
  std::string decode(const Index* ids, std::size_t n) const;
  std::string decode(const std::vector<Index>& ids) const { return decode(ids.data(), ids.size()); }
  /// A printable label of one token for tables and viewers. Char: the character itself; "␠"
  /// (U+2420) for a space; "\n", "\t", "\r" (backslash and letter); "U+XXXX" for the other
  /// controls, spaces and invisible format characters; "<unk>". Byte: the same label as the
  /// ASCII character for 0x20-0x7E, '\n', '\t' and '\r' (so a space is "␠", a newline "\n");
  /// "\xNN" (two uppercase hex digits) for every other byte: the other controls, 0x7F and every
  /// byte >= 0x80. Word: the word itself, "<unk>".
  std::string token_label(Index id) const;

 private:
  Tokenizer(TokenizerKind kind, std::vector<char32_t> code_points, std::vector<std::string> words = {})
      : kind_(kind), code_points_(std::move(code_points)), words_(std::move(words)) {}
  std::size_t entries() const { return kind_ == TokenizerKind::Word ? words_.size() : code_points_.size(); }
  Index id_of(char32_t c) const;              // -1 when absent
  Index id_of(std::string_view word) const;   // -1 when absent

  TokenizerKind kind_;
  std::vector<char32_t> code_points_;  // Char: sorted, distinct
  std::vector<std::string> words_;     // Word: sorted (byte order), distinct
};

/// A word vocabulary as a checkpoint stores it (the /data vocab dataset of uint32 code points):
/// the words joined by '\n', as code points. {"cat", "dog"} -> c a t \n d o g.
std::vector<std::uint32_t> words_to_vocab(const std::vector<std::string>& words);
/// The inverse: split at '\n'. Throws ValueError "tokenizer vocabulary (word): ..." naming the
/// problem and the word's position: no words, an empty word, whitespace in a word, words not in
/// strictly increasing byte order (unsorted or duplicate), a code point that is not a scalar value.
std::vector<std::string> words_from_vocab(const std::vector<std::uint32_t>& code_points);

/// Contiguous, disjoint split of a token sequence of length n by fraction:
///   n_val = floor(n * val_fraction + n * 1e-12), n_test likewise, n_train = n - n_val - n_test
///   train = [0, n_train), val = [n_train, n_train + n_val), test = [n_train + n_val, n).
/// The n * 1e-12 makes decimal fractions exact (100 * 0.29 is 28.999999999999996 in double).
/// Throws ValueError when a fraction is outside [0, 1) or val + test >= 1.
struct TextSplit {
  std::size_t train_begin, train_end, val_begin, val_end, test_begin, test_end;
};
TextSplit split_text(std::size_t n, double val_fraction, double test_fraction);

/// The data of a text run.
struct TextData {
  Tokenizer tokenizer = Tokenizer::bytes();
  std::vector<Index> train, val, test;  ///< token ids of the three splits (val/test may hold <unk>)
  Corpus corpus;                        ///< what was read; `text` is kept (n bytes)
  std::size_t tokens = 0;               ///< n = train.size() + val.size() + test.size()
};

/// The whole pipeline: load_corpus (require_utf8 for Char), take the bytes (Byte) or decode the
/// code points (Char), split_text by token count, build the Char vocabulary from the training
/// split, encode the three splits. Each split whose fraction is > 0 (and the training split)
/// must hold at least `min_tokens` tokens, else ValueError: "task: the validation split has 37
/// tokens, fewer than one window of task.length + 1 = 129 (corpus P has N tokens; lower
/// task.length or raise task.val_fraction)". Memory: the text (n bytes, kept in corpus.text) and
/// 8 bytes per token id; while loading, 4 bytes per token more for the code points (Char). The
/// 2.56 MB English fortunes corpus: 23 MB kept, 36 MB peak (char), 26 MB peak (byte).
/// With `tokenizer` (a checkpoint's), its vocabulary is used instead of one built from the
/// training split (characters it lacks become <unk>).
/// `window` names min_tokens in that message. Throws ValueError for TokenizerKind::Word.
TextData load_text_data(const std::string& path, TokenizerKind kind, TextClean clean, double val_fraction,
                        double test_fraction, std::size_t min_tokens, const Tokenizer* tokenizer = nullptr,
                        const char* window = "task.length + 1");

/// Where a text occurs in a corpus: its file, and the byte offset and line (from 1) in that file.
struct TextPlace {
  std::string file;
  std::size_t byte = 0, line = 0;
  bool cleaned = false;  ///< true when the offset is in the file's text after cleaning (not as stored)
};
/// The first occurrence of `literal` in corpus.text, located in its file as stored (what xxd or
/// dd skip= finds); in the cleaned text only when cleaning made it (an escape inside it); nullopt
/// when absent.
std::optional<TextPlace> find_in_corpus(const Corpus& corpus, std::string_view literal);

}  // namespace qkv::data
