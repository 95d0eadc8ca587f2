// UTF-8 decoding, the Unicode character classes, base64, GPT-2's byte
// alphabet and the encoder.json reader, against hand-checked values (RFC 3629,
// the Unicode Character Database, RFC 4648 test vectors).
#include <gtest/gtest.h>

#include <string>

#include "kappa/tokenize/formats.hpp"
#include "kappa/tokenize/unicode.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace tk = kappa::tokenize;
using tk::CharClass;

TEST(Utf8, DecodesWellFormedSequences) {
  const auto a = tk::decode_utf8("A", 0);
  EXPECT_EQ(a.code_point, U'A');
  EXPECT_EQ(a.length, 1);
  EXPECT_TRUE(a.valid);
  EXPECT_EQ(tk::decode_utf8("\xC3\xA9", 0).code_point, 0xE9u);
  EXPECT_EQ(tk::decode_utf8("\xE2\x82\xAC", 0).code_point, 0x20ACu);
  const auto e = tk::decode_utf8("\xF0\x9F\x98\x80", 0);
  EXPECT_EQ(e.code_point, 0x1F600u);
  EXPECT_EQ(e.length, 4);
  EXPECT_EQ(tk::decode_utf8("\xF4\x8F\xBF\xBF", 0).code_point, 0x10FFFFu);
}

TEST(Utf8, IllFormedBytesAreSingleInvalidCharacters) {
  for (const char* bad :
       {"\x80", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
        "\xF5\x80\x80\x80", "\xFF", "\xE6\x97", "\xF0\x9F\x98", "\xC3"}) {
    const auto c = tk::decode_utf8(bad, 0);
    EXPECT_FALSE(c.valid) << kappa::quoted(bad);
    EXPECT_EQ(c.length, 1);
    EXPECT_EQ(c.code_point, static_cast<unsigned char>(bad[0]));
  }
  EXPECT_EQ(tk::count_chars("h\xC3\xA9llo\x80"), 6u);
  EXPECT_FALSE(tk::is_valid_utf8("ok\xE6\x97"));
  EXPECT_TRUE(tk::is_valid_utf8("\xE6\x97\xA5\xE6\x9C\xAC"));
}

TEST(Utf8, EncodeInvertsDecode) {
  for (char32_t cp : {U'\0', U'A', char32_t{0x7F}, char32_t{0x80}, char32_t{0x7FF}, char32_t{0x800},
                      char32_t{0xFFFD}, char32_t{0x10000}, char32_t{0x10FFFF}}) {
    std::string s;
    tk::append_utf8(s, cp);
    const auto c = tk::decode_utf8(s, 0);
    EXPECT_TRUE(c.valid);
    EXPECT_EQ(c.code_point, cp);
    EXPECT_EQ(c.length, s.size());
  }
}

TEST(Unicode, CharClassesFromTheCharacterDatabase) {
  EXPECT_EQ(tk::char_class(U'A'), CharClass::kLu);
  EXPECT_EQ(tk::char_class(U'z'), CharClass::kLl);
  EXPECT_EQ(tk::char_class(0x00E9), CharClass::kLl);     // e acute
  EXPECT_EQ(tk::char_class(0x0100), CharClass::kLu);     // A macron
  EXPECT_EQ(tk::char_class(0x0101), CharClass::kLl);     // a macron
  EXPECT_EQ(tk::char_class(0x01C5), CharClass::kLt);     // Dz caron, titlecase
  EXPECT_EQ(tk::char_class(0x02B0), CharClass::kLm);     // modifier h
  EXPECT_EQ(tk::char_class(0x4E2D), CharClass::kLo);     // CJK
  EXPECT_EQ(tk::char_class(0x20000), CharClass::kLo);    // CJK Ext B (a First/Last range)
  EXPECT_EQ(tk::char_class(0xAC00), CharClass::kLo);     // Hangul syllable (a range)
  EXPECT_EQ(tk::char_class(0x0627), CharClass::kLo);     // Arabic alef
  EXPECT_EQ(tk::char_class(0x0301), CharClass::kMark);   // combining acute (Mn)
  EXPECT_EQ(tk::char_class(0x0903), CharClass::kMark);   // Devanagari visarga (Mc)
  EXPECT_EQ(tk::char_class(0x20DD), CharClass::kMark);   // enclosing circle (Me)
  EXPECT_EQ(tk::char_class(0xE0100), CharClass::kMark);  // variation selector 17
  EXPECT_EQ(tk::char_class(U'7'), CharClass::kNumber);
  EXPECT_EQ(tk::char_class(0x0661), CharClass::kNumber);  // Arabic-Indic one (Nd)
  EXPECT_EQ(tk::char_class(0x2167), CharClass::kNumber);  // Roman numeral eight (Nl)
  EXPECT_EQ(tk::char_class(0x00BD), CharClass::kNumber);  // one half (No)
  EXPECT_EQ(tk::char_class(U' '), CharClass::kSpace);
  EXPECT_EQ(tk::char_class(U'\t'), CharClass::kSpace);
  EXPECT_EQ(tk::char_class(0x000B), CharClass::kSpace);
  EXPECT_EQ(tk::char_class(0x0085), CharClass::kSpace);  // NEL
  EXPECT_EQ(tk::char_class(0x00A0), CharClass::kSpace);  // NBSP
  EXPECT_EQ(tk::char_class(0x1680), CharClass::kSpace);
  EXPECT_EQ(tk::char_class(0x2028), CharClass::kSpace);
  EXPECT_EQ(tk::char_class(0x3000), CharClass::kSpace);
  EXPECT_EQ(tk::char_class(0x200B), CharClass::kOther);  // zero width space is Cf, not White_Space
  EXPECT_EQ(tk::char_class(0x001C),
            CharClass::kOther);  // not White_Space (Python's isspace says yes)
  EXPECT_EQ(tk::char_class(U'_'), CharClass::kOther);
  EXPECT_EQ(tk::char_class(U'\''), CharClass::kOther);
  EXPECT_EQ(tk::char_class(0x1F600), CharClass::kOther);  // emoji (So)
  EXPECT_EQ(tk::char_class(0x0378), CharClass::kOther);   // unassigned
  EXPECT_EQ(tk::char_class(0x10FFFF), CharClass::kOther);
  EXPECT_EQ(tk::char_class(0x110000), CharClass::kOther);
}

// Scripts added in Unicode 16 (tiktoken and HF tokenizers use 16): their
// letters are letters, not punctuation (the tables were Unicode 15 before).
TEST(Unicode, LettersOfUnicode16Scripts) {
  EXPECT_STREQ(tk::detail::kUnicodeVersion, "16.0.0");
  EXPECT_EQ(tk::char_class(0x10D50), CharClass::kLu);      // Garay capital letter a
  EXPECT_EQ(tk::char_class(0x10D70), CharClass::kLl);      // Garay small letter a
  EXPECT_EQ(tk::char_class(0x10D40), CharClass::kNumber);  // Garay digit zero
  EXPECT_EQ(tk::char_class(0x105C0), CharClass::kLo);      // Todhri letter a
  EXPECT_EQ(tk::char_class(0x16D43), CharClass::kLo);      // Kirat Rai letter a
  EXPECT_EQ(tk::char_class(0x16D40), CharClass::kLm);      // Kirat Rai sign anusvara
  EXPECT_EQ(tk::char_class(0x113B8), CharClass::kMark);    // Tulu-Tigalari vowel sign aa
}

TEST(Unicode, CaseInsensitiveContractionLetters) {
  EXPECT_TRUE(tk::folds_to(U's', 's'));
  EXPECT_TRUE(tk::folds_to(U'S', 's'));
  EXPECT_TRUE(tk::folds_to(0x017F, 's'));  // LATIN SMALL LETTER LONG S folds to s
  EXPECT_FALSE(tk::folds_to(U'x', 's'));
  EXPECT_TRUE(tk::folds_to(U'L', 'l'));
  EXPECT_FALSE(tk::folds_to(0x0130, 'd'));
}

TEST(Base64, Rfc4648TestVectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"f", "Zg=="},        {"fo", "Zm8="},        {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    EXPECT_EQ(tk::base64_encode(plain), coded);
    EXPECT_EQ(tk::base64_decode(coded).value_or("<none>"), plain);
  }
  EXPECT_EQ(tk::base64_decode("/w==").value_or(""), std::string("\xFF"));
  // Non-canonical padding bits: "Q2==" and "Zm9=" would alias "Qw==" and "Zm8=".
  for (const char* bad : {"", "Zm9", "Zm=v", "Z===", "@@@@", "Zg==Zg==", "Zm 9", "Q2==", "Zm9="})
    EXPECT_FALSE(tk::base64_decode(bad)) << bad;
}

TEST(Gpt2Alphabet, MapsBytesToPrintableCodePoints) {
  const auto& a = tk::gpt2_alphabet();
  EXPECT_EQ(a.to_unicode[' '], 0x120u);  // the familiar "G dot" of GPT-2 vocabularies
  EXPECT_EQ(a.to_unicode['\n'], 0x10Au);
  EXPECT_EQ(a.to_unicode[0x00], 0x100u);
  EXPECT_EQ(a.to_unicode[0x7F], 0x121u);
  EXPECT_EQ(a.to_unicode[0xAD], 0x143u);
  EXPECT_EQ(a.to_unicode['!'], static_cast<char32_t>('!'));
  EXPECT_EQ(a.to_unicode[0xE9], 0xE9u);
  EXPECT_EQ(a.encode(" the"), "\xC4\xA0the");
  EXPECT_EQ(a.decode("\xC4\xA0the").value_or(""), " the");
  EXPECT_FALSE(a.decode(" the"));  // a raw space is not in the alphabet
}

TEST(Json, ReadsAFlatObjectOfIds) {
  const auto kv = tk::parse_json_int_object(
      R"( {"a": 1, "\u0120b" :2,"\ud83d\ude00":3, "q\"\\/\n": 40} )", "x.json");
  ASSERT_EQ(kv.size(), 4u);
  EXPECT_EQ(kv[0], (std::pair<std::string, long long>{"a", 1}));
  EXPECT_EQ(kv[1].first,
            "\xC4\xA0"
            "b");
  EXPECT_EQ(kv[2].first, "\xF0\x9F\x98\x80");
  EXPECT_EQ(kv[3], (std::pair<std::string, long long>{"q\"\\/\n", 40}));
  EXPECT_TRUE(tk::parse_json_int_object("{}", "x.json").empty());
}

TEST(Json, MalformedInputNamesFileLineAndByte) {
  auto message = [](const char* text) {
    try {
      tk::parse_json_int_object(text, "enc.json");
    } catch (const kappa::FormatError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(message("{\"a\" 1}"), "kappa: enc.json:1 (byte 5): expected ':' after a key");
  EXPECT_EQ(message("{\n\"a\": 1,\n\"b\": x}"),
            "kappa: enc.json:3 (byte 15): expected an integer id after key \"b\"");
  EXPECT_NE(message("{\"a\": 1").find("expected ',' or '}'"), std::string::npos);
  EXPECT_NE(message("{\"a").find("unterminated string"), std::string::npos);
  EXPECT_NE(message("{\"\\x\": 1}").find("unknown escape"), std::string::npos);
  EXPECT_NE(message("{\"\\ud800\": 1}").find("unpaired surrogate"), std::string::npos);
  EXPECT_NE(message("{} x").find("unexpected data"), std::string::npos);
  EXPECT_NE(message("[1]").find("expected '{'"), std::string::npos);
}

TEST(Files, MissingFileIsAFormatErrorNamingIt) {
  try {
    tk::read_file("/nonexistent/kappa/encoder.json");
    FAIL() << "no exception";
  } catch (const kappa::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kappa/encoder.json"), std::string::npos);
  }
}
