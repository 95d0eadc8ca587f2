// kappa/tokenize/concepts.hpp - what every kappa tokenizer offers.
//
// Tokenization maps text to an index sequence (the paper's section 1): a
// tokenizer with vocabulary T of size N_T turns a UTF-8 string into ids
// i_1 ... i_N with 0 <= i_j < N_T, and back.
#pragma once

#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kappa/core/matrix.hpp"

namespace kappa::tokenize {

/// How encode() treats text that spells a special token.
enum class SpecialTokens {
  kAsText,     ///< like any other text (tiktoken's encode_ordinary)
  kRecognize,  ///< as the special token's id (tiktoken's encode(allowed_special="all"))
};

/// Whether encode() adds the BOS/EOS ids the tokenizer is configured with.
enum class AddSpecial {
  kYes,  ///< prefix and suffix as configured (see the file comment)
  kNo,   ///< the text's ids only
};

/// Whether decode() writes special tokens (added tokens marked special).
enum class SkipSpecial {
  kNo,   ///< special tokens appear as their text
  kYes,  ///< special tokens are left out
};

/// A tokenizer: encode(text) -> ids, decode(ids) -> text, vocab_size() = N_T,
/// token(id) -> the token's string (RangeError if id is not in T), and
/// find(token) -> its id if the string is a token.
template <class T>
concept Tokenizer = requires(const T& t, std::string_view text, std::span<const TokenId> ids,
                             TokenId id) {
  { t.encode(text) } -> std::same_as<std::vector<TokenId>>;
  { t.decode(ids) } -> std::same_as<std::string>;
  { t.vocab_size() } -> std::convertible_to<std::size_t>;
  { t.token(id) } -> std::convertible_to<std::string>;
  { t.find(text) } -> std::same_as<std::optional<TokenId>>;
};

}  // namespace kappa::tokenize
