// The character classes of GPT-2's pre-tokenizer pattern (data/gpt2_bpe.h):
// letters \p{L}, numbers \p{N}, white space \s (Unicode's White_Space property, as
// Python's `regex` module matches \s) and everything else.
//
//   ClassifyCodePoint(U'é') == UnicodeClass::kLetter
//   ClassifyCodePoint(0x0085) == UnicodeClass::kSpace   // NEL
//
// The tables in unicode_classes.cc are generated from node's regular expression
// engine by tools/unicode/gen_unicode_classes.js; UnicodeClassesVersion() names the
// Unicode version they come from. Code points assigned after that version are kOther.
#ifndef ZEROSHARD_DATA_UNICODE_CLASSES_H_
#define ZEROSHARD_DATA_UNICODE_CLASSES_H_

#include <cstdint>

namespace zeroshard {

enum class UnicodeClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// The class of code point c (surrogates and values past U+10FFFF are kOther).
UnicodeClass ClassifyCodePoint(char32_t c);

// "Unicode 17.0 (node v20..., ICU ...)": where the tables come from.
const char* UnicodeClassesVersion();

}  // namespace zeroshard

#endif  // ZEROSHARD_DATA_UNICODE_CLASSES_H_
