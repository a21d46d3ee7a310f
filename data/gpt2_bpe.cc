// GPT-2's byte-level BPE (gpt2_bpe.h). Kept in one file (issue 19's ~700-line rule): the
// pre-tokenizer, the vocabulary readers and the merge loops share the byte-character
// tables and the private representation, and are read together against encoder.py.
#include "zeroshard/data/gpt2_bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <queue>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/data/gpt2_vocab_data.h"
#include "zeroshard/data/unicode_classes.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {
namespace {

// ---------------------------------------------------------------------------
// UTF-8 and character classes
// ---------------------------------------------------------------------------

constexpr char32_t kInvalid = 0xFFFFFFFF;

// Decodes one UTF-8 character at p (p < end): returns its length and sets *cp, or
// returns 1 with *cp = kInvalid for a byte that does not start a well-formed
// sequence (overlong forms, surrogates, values past U+10FFFF, truncations).
inline int DecodeUtf8(const unsigned char* p, const unsigned char* end, char32_t* cp) {
  const unsigned char b = p[0];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  auto cont = [&](int i) { return p + i < end && (p[i] & 0xC0) == 0x80; };
  if (b >= 0xC2 && b <= 0xDF && cont(1)) {
    *cp = (char32_t{b & 0x1Fu} << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (b >= 0xE0 && b <= 0xEF && cont(1) && cont(2)) {
    const char32_t c = (char32_t{b & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3F);
    if (c >= 0x800 && (c < 0xD800 || c > 0xDFFF)) {
      *cp = c;
      return 3;
    }
  } else if (b >= 0xF0 && b <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const char32_t c = (char32_t{b & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) |
                       (char32_t{p[2] & 0x3Fu} << 6) | (p[3] & 0x3F);
    if (c >= 0x10000 && c <= 0x10FFFF) {
      *cp = c;
      return 4;
    }
  }
  *cp = kInvalid;
  return 1;
}

constexpr auto kAsciiClass = [] {
  std::array<UnicodeClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t[c] = UnicodeClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      t[c] = UnicodeClass::kNumber;
    } else if (c == ' ' || (c >= '\t' && c <= '\r')) {
      t[c] = UnicodeClass::kSpace;
    } else {
      t[c] = UnicodeClass::kOther;
    }
  }
  return t;
}();

// The class of the character at p and its length in bytes.
inline UnicodeClass ClassAt(const unsigned char* p, const unsigned char* end, int* len) {
  if (*p < 0x80) {
    *len = 1;
    return kAsciiClass[*p];
  }
  char32_t cp;
  *len = DecodeUtf8(p, end, &cp);
  return cp == kInvalid ? UnicodeClass::kOther : ClassifyCodePoint(cp);
}

// ---------------------------------------------------------------------------
// Note [GPT-2 pre-tokenizer]
// ---------------------------------------------------------------------------
// GPT-2 splits text with re.findall of
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Each match starts where the last ended; at a position the first alternative that
// matches wins, and a quantifier backtracks only to let what follows match. Every
// character is a letter (L), a number (N), white space (S) or other (O); the four are
// disjoint, so at position p with character c:
//  - c is ' and the next one or two characters are s, t, m, d or re, ve, ll
//    (lower case only): that contraction. Nothing else starts with ', so a '
//    not followed by one of them starts an O run.
//  - c is a space (U+0020 only) followed by a non-S character of class X: the space
//    and the run of X after it (` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`; one of
//    the three matches since X is L, N or O).
//  - c is L, N or O: the greedy run of that class. Runs do not stop for a '
//    inside them ("don't" is "don", "'t"; "!'s" is "!'", "s").
//  - otherwise c starts a run of S characters of n characters. If the run reaches the
//    end of the text, `\s+(?!\S)` takes all of it. Otherwise a non-S follows, so
//    `\s+(?!\S)` backtracks to the first n-1 (the lookahead then sees the run's last
//    character, which is S); with n == 1 it fails and `\s+` takes the one character.
//    The last character is then matched on its own: a space joins the word after it
//    (the second case), any other S character is a pre-token alone.
// So "a  \n b" is "a", "  \n", " b"; "x   y" is "x", "  ", " y"; " \t x\n\n" is " \t", " x", "\n\n".
template <typename Emit>
void ForEachPreToken(absl::string_view text, Emit&& emit) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = p + text.size();
  while (p < end) {
    const unsigned char* const start = p;
    if (*p == '\'' && p + 1 < end) {
      const unsigned char c1 = p[1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        emit(start, 2);
        p += 2;
        continue;
      }
      if (p + 2 < end) {
        const unsigned char c2 = p[2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          emit(start, 3);
          p += 3;
          continue;
        }
      }
    }
    int len;
    UnicodeClass cls = ClassAt(p, end, &len);
    const unsigned char* q = p + len;
    if (*p == ' ' && q < end) {
      int next_len;
      const UnicodeClass next = ClassAt(q, end, &next_len);
      if (next != UnicodeClass::kSpace) {
        cls = next;
        q += next_len;
      }
    }
    if (cls != UnicodeClass::kSpace) {
      while (q < end && ClassAt(q, end, &len) == cls) q += len;
      emit(start, q - start);
      p = q;
      continue;
    }
    const unsigned char* last = p;  // the run's last character
    while (q < end && ClassAt(q, end, &len) == UnicodeClass::kSpace) {
      last = q;
      q += len;
    }
    if (q == end || last == p) {
      emit(start, q - start);
      p = q;
    } else {
      emit(start, last - start);
      p = last;
    }
  }
}

// ---------------------------------------------------------------------------
// The vocabulary files
// ---------------------------------------------------------------------------

// GPT-2's bytes_to_unicode(): byte b is spelled in encoder.json and vocab.bpe as
// the character kByteChar[b]. Printable Latin-1 bytes stand for themselves; the
// other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) take U+0100, U+0101, ... in order.
constexpr auto kByteChar = [] {
  std::array<char32_t, 256> t{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
  }
  return t;
}();
constexpr char32_t kByteCharLimit = 256 + 68;  // every kByteChar is below it
constexpr auto kCharByte = [] {
  std::array<int16_t, kByteCharLimit> t{};
  for (auto& v : t) v = -1;
  for (int b = 0; b < 256; ++b) t[kByteChar[b]] = static_cast<int16_t>(b);
  return t;
}();

std::string Quote(absl::string_view s, size_t max = 40) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = s[i];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max) out += "...";
  return out + "\"";
}

// Turns a token as spelled in the files (UTF-8 of byte characters) into its bytes.
// Errors name the token, not where it is: the caller adds that.
absl::StatusOr<std::string> SpelledToBytes(absl::string_view spelled) {
  std::string bytes;
  const auto* p = reinterpret_cast<const unsigned char*>(spelled.data());
  const auto* end = p + spelled.size();
  while (p < end) {
    char32_t cp;
    const int len = DecodeUtf8(p, end, &cp);
    if (cp == kInvalid) {
      return absl::InvalidArgumentError(
          absl::StrCat("the token ", Quote(spelled), " is not valid UTF-8 (byte 0x", absl::Hex(*p), ")"));
    }
    if (cp >= kByteCharLimit || kCharByte[cp] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the token ", Quote(spelled), " has the character U+",
          absl::StrFormat("%04X", static_cast<uint32_t>(cp)),
          ", expected only the 256 byte characters of GPT-2's bytes_to_unicode()"));
    }
    bytes += static_cast<char>(kCharByte[cp]);
    p += len;
  }
  return bytes;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    *out += static_cast<char>(c);
  } else if (c < 0x800) {
    *out += static_cast<char>(0xC0 | (c >> 6));
    *out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    *out += static_cast<char>(0xE0 | (c >> 12));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (c >> 18));
    *out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Reads encoder.json: one JSON object of strings to integers, {"!": 0, ...}.
class EncoderJsonReader {
 public:
  EncoderJsonReader(absl::string_view text, absl::string_view name) : s_(text), name_(name) {}

  // Calls add(key, value) for each member in order; an error it returns gets the
  // key's place in the file put in front.
  template <typename Add>
  absl::Status Read(Add&& add) {
    SkipSpace();
    if (!Consume('{')) return Error("'{' (a JSON object of token -> id)");
    SkipSpace();
    if (Consume('}')) return Error("at least one token", /*at=*/pos_ - 1);
    std::string key;
    while (true) {
      SkipSpace();
      const size_t key_pos = pos_;
      ZS_RETURN_IF_ERROR(ReadString(&key));
      SkipSpace();
      if (!Consume(':')) return Error("':' after the key");
      SkipSpace();
      int64_t value;
      ZS_RETURN_IF_ERROR(ReadId(&value));
      if (absl::Status added = add(key, value); !added.ok()) {
        return absl::Status(added.code(), absl::StrCat(Where(key_pos), ": ", added.message()));
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error("',' or '}'");
    }
    SkipSpace();
    if (pos_ != s_.size()) return Error("the end of the file after the object");
    return absl::OkStatus();
  }

 private:
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool Consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // Only for error messages: counting lines is O(file size).
  std::string Where(size_t pos) const {
    pos = std::min(pos, s_.size());
    const int64_t line = 1 + std::count(s_.begin(), s_.begin() + pos, '\n');
    return absl::StrCat(name_, " (line ", line, ", byte ", pos, ")");
  }
  absl::Status Error(absl::string_view expected, size_t at = std::string::npos) {
    if (at != std::string::npos) pos_ = at;
    const std::string found = pos_ < s_.size() ? Quote(s_.substr(pos_), 20) : std::string("the end of the file");
    return absl::InvalidArgumentError(absl::StrCat(Where(pos_), ": expected ", expected, ", found ", found));
  }
  absl::Status ReadString(std::string* out) {
    out->clear();
    if (!Consume('"')) return Error("a token in double quotes");
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (static_cast<unsigned char>(c) < 0x20) return Error("a string character (JSON escapes control characters)");
      if (c != '\\') {
        *out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= s_.size()) break;
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          char32_t c1;
          ZS_RETURN_IF_ERROR(ReadHex4(&c1));
          if (c1 >= 0xD800 && c1 <= 0xDBFF) {  // a surrogate pair
            char32_t c2;
            if (!(Consume('\\') && Consume('u'))) return Error("a low surrogate \\uDC00-\\uDFFF after a high one");
            ZS_RETURN_IF_ERROR(ReadHex4(&c2));
            if (c2 < 0xDC00 || c2 > 0xDFFF) return Error("a low surrogate \\uDC00-\\uDFFF", pos_ - 6);
            c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
          } else if (c1 >= 0xDC00 && c1 <= 0xDFFF) {
            return Error("a character, not a lone low surrogate", pos_ - 6);
          }
          AppendUtf8(c1, out);
          break;
        }
        default:
          return Error("a JSON escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)", pos_ - 2);
      }
    }
    return Error("the closing '\"' of the token");
  }
  absl::Status ReadHex4(char32_t* c) {
    *c = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = pos_ < s_.size() ? s_[pos_] : '\0';
      int v;
      if (h >= '0' && h <= '9') v = h - '0';
      else if (h >= 'a' && h <= 'f') v = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') v = h - 'A' + 10;
      else return Error("four hex digits after \\u");
      *c = (*c << 4) | v;
      ++pos_;
    }
    return absl::OkStatus();
  }
  absl::Status ReadId(int64_t* value) {
    const size_t start = pos_;
    *value = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9' && pos_ - start < 10) {
      *value = *value * 10 + (s_[pos_] - '0');
      ++pos_;
    }
    if (pos_ == start || (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E' ||
                                                (s_[pos_] >= '0' && s_[pos_] <= '9')))) {
      return Error("a token id (an integer from 0 to 2^31-1)", start);
    }
    if (*value > INT32_MAX) return Error("a token id (an integer from 0 to 2^31-1)", start);
    return absl::OkStatus();
  }

  absl::string_view s_;
  absl::string_view name_;
  size_t pos_ = 0;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("Gpt2Bpe: cannot open \"", path, "\""));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Gpt2Bpe>> Gpt2Bpe::Bundled(const Options& options) {
  return FromText(Gpt2EncoderJson(), Gpt2VocabBpe(), options, "data/gpt2/encoder.json (bundled)",
                  "data/gpt2/vocab.bpe (bundled)");
}

absl::StatusOr<std::unique_ptr<Gpt2Bpe>> Gpt2Bpe::FromFiles(const std::string& encoder_json_path,
                                                            const std::string& vocab_bpe_path,
                                                            const Options& options) {
  ZS_ASSIGN_OR_RETURN(std::string json, ReadFile(encoder_json_path));
  ZS_ASSIGN_OR_RETURN(std::string bpe, ReadFile(vocab_bpe_path));
  return FromText(json, bpe, options, encoder_json_path, vocab_bpe_path);
}

absl::StatusOr<std::unique_ptr<Gpt2Bpe>> Gpt2Bpe::FromText(absl::string_view encoder_json,
                                                           absl::string_view vocab_bpe, const Options& options,
                                                           absl::string_view encoder_json_name,
                                                           absl::string_view vocab_bpe_name) {
  std::unique_ptr<Gpt2Bpe> t(new Gpt2Bpe(options));

  // encoder.json: token -> id, the ids 0 .. n-1 each once.
  absl::flat_hash_map<std::string, int32_t> id_of;  // token bytes -> id
  std::vector<std::pair<int64_t, std::string>> entries;
  EncoderJsonReader reader(encoder_json, encoder_json_name);
  ZS_RETURN_IF_ERROR(reader.Read([&](const std::string& key, int64_t id) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::string bytes, SpelledToBytes(key));
    auto [it, inserted] = id_of.emplace(bytes, static_cast<int32_t>(id));
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("the token ", Quote(key), " appears twice (ids ", it->second, " and ", id, ")"));
    }
    entries.emplace_back(id, std::move(bytes));
    return absl::OkStatus();
  }));
  const int64_t n = static_cast<int64_t>(entries.size());
  t->token_bytes_.resize(n);
  std::vector<bool> seen(n, false);
  for (auto& [id, bytes] : entries) {
    if (id >= n) {
      return absl::InvalidArgumentError(absl::StrCat(encoder_json_name, ": the token ", Quote(bytes), " has id ",
                                                     id, ", expected ids 0 to ", n - 1, " for ", n, " tokens"));
    }
    if (seen[id]) {
      return absl::InvalidArgumentError(absl::StrCat(encoder_json_name, ": id ", id,
                                                     " belongs to two tokens, expected each id once"));
    }
    seen[id] = true;
    t->token_bytes_[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end()) {
      std::string spelled;
      AppendUtf8(kByteChar[b], &spelled);
      return absl::InvalidArgumentError(
          absl::StrCat(encoder_json_name, ": no token for the byte 0x", absl::StrFormat("%02X", b), " (spelled ",
                       Quote(spelled), "), expected a token for each of the 256 bytes"));
    }
    t->byte_token_[b] = it->second;
  }
  if (auto it = id_of.find("<|endoftext|>"); it != id_of.end()) t->eot_token_ = it->second;

  // vocab.bpe: "#version: ..." then one merge per line, "left right", by rank.
  size_t pos = 0;
  int64_t line_no = 0;
  auto next_line = [&](absl::string_view* line) {
    if (pos >= vocab_bpe.size()) return false;
    size_t eol = vocab_bpe.find('\n', pos);
    if (eol == absl::string_view::npos) eol = vocab_bpe.size();
    *line = vocab_bpe.substr(pos, eol - pos);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    pos = eol + 1;
    ++line_no;
    return true;
  };
  absl::string_view line;
  if (!next_line(&line) || line.substr(0, 9) != "#version:") {
    return absl::InvalidArgumentError(absl::StrCat(vocab_bpe_name, " line 1: expected \"#version: 0.2\", found ",
                                                   line_no == 0 ? std::string("an empty file") : Quote(line)));
  }
  t->byte_pair_merges_.assign(256 * 256, Merge{INT32_MAX, -1});
  absl::flat_hash_map<uint64_t, int64_t> line_of;  // pair -> its line, for the duplicate message
  while (next_line(&line)) {
    const std::string where = absl::StrCat(vocab_bpe_name, " line ", line_no);
    if (line.empty() && pos >= vocab_bpe.size()) break;  // the newline at the end of the file
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos || space == 0 || space + 1 >= line.size() ||
        line.find(' ', space + 1) != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected a merge \"left right\" (two tokens, one space), found ", Quote(line)));
    }
    const absl::string_view left_spelled = line.substr(0, space), right_spelled = line.substr(space + 1);
    absl::StatusOr<std::string> left_or = SpelledToBytes(left_spelled);
    absl::StatusOr<std::string> right_or = SpelledToBytes(right_spelled);
    for (const auto* part : {&left_or, &right_or}) {
      if (!part->ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", part->status().message()));
    }
    const std::string& left = *left_or;
    const std::string& right = *right_or;
    int32_t ids[3];
    const std::string* parts[3] = {&left, &right, nullptr};
    const std::string merged = left + right;
    parts[2] = &merged;
    for (int k = 0; k < 3; ++k) {
      auto it = id_of.find(*parts[k]);
      if (it == id_of.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": the merge ", Quote(line), " needs the token ",
            k == 0 ? Quote(left_spelled) : k == 1 ? Quote(right_spelled) : Quote(absl::StrCat(left_spelled, right_spelled)),
            ", which ", encoder_json_name, " does not have"));
      }
      ids[k] = it->second;
    }
    const uint64_t key = PairKey(ids[0], ids[1]);
    if (auto [it, inserted] = line_of.emplace(key, line_no); !inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the merge ", Quote(line), " repeats line ", it->second, ", expected each merge once"));
    }
    const int32_t rank = static_cast<int32_t>(t->merge_by_rank_.size());
    t->merges_.emplace(key, Merge{rank, ids[2]});
    if (left.size() == 1 && right.size() == 1) {
      t->byte_pair_merges_[static_cast<unsigned char>(left[0]) * 256 + static_cast<unsigned char>(right[0])] =
          Merge{rank, ids[2]};
    }
    t->merge_by_rank_.push_back({ids[0], ids[1], ids[2]});
  }
  return t;
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

std::vector<absl::string_view> Gpt2Bpe::PreTokenize(absl::string_view text) {
  std::vector<absl::string_view> out;
  ForEachPreToken(text, [&](const unsigned char* p, size_t len) {
    out.emplace_back(reinterpret_cast<const char*>(p), len);
  });
  return out;
}

void Gpt2Bpe::EncodeTo(absl::string_view text, std::vector<int32_t>* out) {
  ForEachPreToken(text, [&](const unsigned char* p, size_t len) {
    if (len == 1) {
      out->push_back(byte_token_[*p]);
    } else {
      EncodeWord(absl::string_view(reinterpret_cast<const char*>(p), len), out);
    }
  });
}

void Gpt2Bpe::EncodeWord(absl::string_view word, std::vector<int32_t>* out) {
  if (options_.cache_entries == 0) {
    MergeWord(word, out);
    return;
  }
  if (auto it = cache_.find(word); it != cache_.end()) {
    const auto [offset, length] = it->second;
    out->insert(out->end(), cache_ids_.begin() + offset, cache_ids_.begin() + offset + length);
    return;
  }
  const size_t before = out->size();
  MergeWord(word, out);
  const size_t length = out->size() - before;
  if (cache_.size() >= options_.cache_entries || cache_ids_.size() + length > UINT32_MAX) {
    cache_.clear();
    cache_ids_.clear();
  }
  cache_.emplace(std::string(word),
                 std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(cache_ids_.size()), static_cast<uint32_t>(length)));
  cache_ids_.insert(cache_ids_.end(), out->begin() + before, out->end());
}

void Gpt2Bpe::MergeWord(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.size() >= options_.heap_merge_min_bytes) {
    MergeWordByHeap(word, out);
  } else {
    MergeWordByScan(word, out);
  }
}

// GPT-2's loop: find the adjacent pair of lowest rank, merge each of its occurrences
// left to right (an occurrence that overlaps the one before is skipped: "aaa" with the
// merge "a a" gives "aa", "a"), repeat until no pair has a merge. The rank of each
// adjacent pair is kept in ranks[] and looked up again only beside a merged symbol;
// ranks are unique to their pair, so the occurrences are where ranks[i] is the lowest.
void Gpt2Bpe::MergeWordByScan(absl::string_view word, std::vector<int32_t>* out) const {
  size_t n = word.size();
  absl::InlinedVector<int32_t, 32> syms(n), ranks(n), merged(n), from(n);
  for (size_t i = 0; i < n; ++i) syms[i] = byte_token_[static_cast<unsigned char>(word[i])];
  auto look_up = [&](size_t i) {  // the pair (syms[i], syms[i + 1])
    auto it = merges_.find(PairKey(syms[i], syms[i + 1]));
    ranks[i] = it == merges_.end() ? INT32_MAX : it->second.rank;
    merged[i] = it == merges_.end() ? -1 : it->second.id;
  };
  for (size_t i = 0; i + 1 < n; ++i) {  // pairs of bytes: the dense table, no hashing
    const Merge& m = byte_pair_merges_[static_cast<unsigned char>(word[i]) * 256 + static_cast<unsigned char>(word[i + 1])];
    ranks[i] = m.rank;
    merged[i] = m.id;
  }
  while (n > 1) {
    int32_t best = INT32_MAX;
    size_t first = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best) {
        best = ranks[i];
        first = i;
      }
    }
    if (best == INT32_MAX) break;
    const int32_t id = merged[first];
    // Compact in place; from[w] is the old position of an unmerged symbol, -1 for a
    // merged one. Positions before `first` keep their symbols and ranks.
    size_t w = first;
    for (size_t i = first; i < n; ++w) {
      if (i + 1 < n && ranks[i] == best) {
        syms[w] = id;
        from[w] = -1;
        i += 2;
      } else {
        syms[w] = syms[i];
        from[w] = static_cast<int32_t>(i);
        i += 1;
      }
    }
    n = w;
    // Two unmerged neighbours were neighbours before (nothing was merged between
    // them): their rank is still in ranks[from], at or after w, not yet overwritten.
    if (first > 0) look_up(first - 1);
    for (size_t v = first; v + 1 < n; ++v) {
      if (from[v] >= 0 && from[v + 1] >= 0) {
        ranks[v] = ranks[from[v]];
        merged[v] = merged[from[v]];
      } else {
        look_up(v);
      }
    }
  }
  out->insert(out->end(), syms.begin(), syms.begin() + n);
}

// Note [Long words]
// The same merges as MergeWordByScan in O(n log n): the symbols form a linked list
// and every adjacent pair that has a merge waits in a min-heap ordered by (rank,
// position). A round takes every entry of the lowest rank r at once (all of them are
// occurrences of the one pair of rank r, or stale), in position order, and merges each
// one that is still that pair, left to right; an occurrence that overlaps one merged
// before it in the round no longer is that pair and is skipped, as in the scan. Only
// then are the pairs around the merged symbols pushed, so a pair made in round r is
// not merged in round r, as in the scan (it cannot be the pair of rank r again: the
// merged token is longer than either part).
void Gpt2Bpe::MergeWordByHeap(absl::string_view word, std::vector<int32_t>* out) const {
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<int32_t> id(n), next(n), prev(n);
  std::vector<char> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) {
    id[i] = byte_token_[static_cast<unsigned char>(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  using Entry = std::pair<int32_t, int32_t>;  // (rank, position of the left symbol)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(id[pos], id[next[pos]]));
    if (it != merges_.end()) heap.emplace(it->second.rank, pos);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<int32_t> merged_at;
  while (!heap.empty()) {
    const int32_t rank = heap.top().first;
    const RankedMerge& m = merge_by_rank_[rank];
    merged_at.clear();
    while (!heap.empty() && heap.top().first == rank) {
      const int32_t pos = heap.top().second;
      heap.pop();
      const int32_t nx = next[pos];
      if (!alive[pos] || nx < 0 || id[pos] != m.left || id[nx] != m.right) continue;  // stale
      id[pos] = m.id;
      alive[nx] = 0;
      next[pos] = next[nx];
      if (next[nx] >= 0) prev[next[nx]] = pos;
      merged_at.push_back(pos);
    }
    for (const int32_t pos : merged_at) {
      push(prev[pos]);
      push(pos);
    }
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out->push_back(id[i]);
}

size_t Gpt2Bpe::NextCut(absl::string_view text, size_t from) const {
  // A cut after a newline with printable ASCII on both sides ("x\n|y"): no pre-token
  // crosses it (Note [GPT-2 pre-tokenizer]): the character before is not white space,
  // so the newline is a pre-token alone, both in the whole text (a non-space follows)
  // and at the end of the first piece; and the second piece starts where a match of
  // the whole text starts.
  if (from == 0) return 0;
  auto printable = [](char c) { return c > ' ' && c < 0x7F; };
  for (size_t p = std::max<size_t>(from, 2); p < text.size(); ++p) {
    const void* nl = std::memchr(text.data() + p - 1, '\n', text.size() - (p - 1));
    if (nl == nullptr) break;
    p = static_cast<const char*>(nl) - text.data() + 1;
    if (p < text.size() && p >= 2 && printable(text[p - 2]) && printable(text[p])) return p;
  }
  return text.size();
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

absl::StatusOr<std::string> Gpt2Bpe::Decode(absl::Span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("Gpt2Bpe::Decode: token ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ", vocab_size(), ")"));
    }
    text += token_bytes_[ids[i]];
  }
  return text;
}

}  // namespace zeroshard
