// Tests of kappa/tokenize/normalize.hpp: the four normalization forms and
// Hugging Face's normalizers against the committed peers
// (tests/data/tokenize/normalize/peer_normalize.json: node's ICU and HF
// tokenizers, written by tests/tokenize/peer/normalize_peer.cjs), Unicode's
// NormalizationTest.txt 16.0 (NormalizationTest.tar.xz there, extracted at
// configure time), properties, and the tokenizer.json builder's errors.
#include "kappa/tokenize/normalize.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {
namespace normalize_test {  // (one TU with the area's other files)

using kappa::tokenize::NormalizationForm;
using kappa::tokenize::normalize;
using kappa::tokenize::normalizer_from_json;

const std::string kData = KAPPA_TEST_DATA_DIR "/tokenize/normalize";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string hex(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = kappa::tokenize::decode_utf8(s, i);
    char buf[16];
    std::snprintf(buf, sizeof buf, "%s%04X", out.empty() ? "" : " ",
                  static_cast<unsigned>(c.code_point));
    out += buf;
    i += c.length;
  }
  return out;
}

constexpr NormalizationForm kForms[] = {NormalizationForm::kNFC, NormalizationForm::kNFD,
                                        NormalizationForm::kNFKC, NormalizationForm::kNFKD};
const char* const kFormNames[] = {"NFC", "NFD", "NFKC", "NFKD"};
const char* const kFormKeys[] = {"nfc", "nfd", "nfkc", "nfkd"};

const nlohmann::json& peers() {
  static const nlohmann::json j = nlohmann::json::parse(read_all(kData + "/peer_normalize.json"));
  return j;
}

TEST(Normalize, FourFormsMatchNodeIcu) {
  const auto& cases = peers().at("cases");
  ASSERT_GT(cases.size(), 9000u);
  int mismatches = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    for (int f = 0; f < 4; ++f) {
      const std::string want = c.at(kFormKeys[f]).get<std::string>();
      const std::string got = normalize(text, kForms[f]);
      if (got != want && ++mismatches <= 20) {
        ADD_FAILURE() << kFormNames[f] << "(" << hex(text) << ") = " << hex(got)
                      << ", node: " << hex(want);
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// True when `hf` is `got` with some marks (General_Category M in Unicode 16)
// kept that kappa dropped: HF's StripAccents knows fewer marks.
bool only_extra_marks(std::string_view got, std::string_view hf) {
  std::size_t i = 0;
  for (std::size_t k = 0; k < hf.size();) {
    const auto c = kappa::tokenize::decode_utf8(hf, k);
    const auto g = i < got.size() ? kappa::tokenize::decode_utf8(got, i) : c;
    if (i < got.size() && g.code_point == c.code_point) {
      i += g.length;
    } else if (!kappa::tokenize::is_mark(c.code_point)) {
      return false;
    }
    k += c.length;
  }
  return i == got.size();
}

// HF's normalizers. HF's NFC/NFD/NFKC/NFKD and StripAccents use the tables of
// the crate unicode-normalization-alignments, older than Unicode 16: where
// HF's form differs from node's (the file stores HF's form only then), or
// where HF's StripAccents keeps marks that Unicode 16 has, kappa follows
// Unicode 16 and the case is counted, not compared.
TEST(Normalize, HfNormalizersMatchHf) {
  const auto& j = peers();
  int compared = 0;
  int older = 0;
  int mismatches = 0;
  for (const auto& [name, config] : j.at("configs").items()) {
    const auto chain = normalizer_from_json(config);
    for (const auto& c : j.at("cases")) {
      const auto& hf = c.at("hf");
      const bool hf_tables_older =
          hf.contains("NFC") || hf.contains("NFD") || hf.contains("NFKC") || hf.contains("NFKD");
      std::string want;
      if (hf.contains(name)) {
        want = hf.at(name).get<std::string>();
      } else {
        for (int f = 0; f < 4; ++f) {
          if (name == kFormNames[f]) want = c.at(kFormKeys[f]).get<std::string>();
        }
      }
      const std::string text = c.at("text").get<std::string>();
      const std::string got = chain.apply(text);
      if (got == want) {
        ++compared;
        continue;
      }
      if (hf_tables_older || only_extra_marks(got, want)) {
        ++older;
        continue;
      }
      if (++mismatches <= 20) {
        ADD_FAILURE() << name << "(" << hex(text) << ") = " << hex(got) << ", HF: " << hex(want);
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  std::cout << "[ HF      ] " << compared << " equal, " << older
            << " differ where HF's normalization tables predate Unicode 16\n";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char ch : s) {
    if (ch == sep) {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

std::string from_hex(const std::string& field) {
  std::string out;
  std::istringstream in(field);
  std::string h;
  while (in >> h)
    kappa::tokenize::append_utf8(out, static_cast<char32_t>(std::stoul(h, nullptr, 16)));
  return out;
}

// UAX #15's conformance invariants on every line of NormalizationTest.txt,
// and X == NFC(X) == NFD(X) == NFKC(X) == NFKD(X) for every other code point.
TEST(Normalize, NormalizationTest16) {
  std::ifstream in(KAPPA_NORMALIZATION_TEST);
  ASSERT_TRUE(in.good()) << KAPPA_NORMALIZATION_TEST;
  std::string line;
  bool part1 = false;
  std::vector<bool> listed(0x110000, false);
  int lines = 0;
  int failures = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '@') {
      part1 = line == "@Part1";
      continue;
    }
    const auto f = split(line, ';');
    ASSERT_EQ(f.size(), 5u) << line;
    std::string c[5];
    for (std::size_t k = 0; k < 5; ++k) c[k] = from_hex(f[k]);
    if (part1) listed[std::stoul(f[0], nullptr, 16)] = true;
    ++lines;
    auto check = [&](NormalizationForm form, int src, int want) {
      if (normalize(c[src], form) != c[want] && ++failures <= 20) {
        ADD_FAILURE() << line << ": form " << static_cast<int>(form) << " of c" << src + 1;
      }
    };
    for (int s : {0, 1, 2}) check(NormalizationForm::kNFC, s, 1);
    for (int s : {3, 4}) check(NormalizationForm::kNFC, s, 3);
    for (int s : {0, 1, 2}) check(NormalizationForm::kNFD, s, 2);
    for (int s : {3, 4}) check(NormalizationForm::kNFD, s, 4);
    for (int s : {0, 1, 2, 3, 4}) check(NormalizationForm::kNFKC, s, 3);
    for (int s : {0, 1, 2, 3, 4}) check(NormalizationForm::kNFKD, s, 4);
  }
  EXPECT_GT(lines, 19000);
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (listed[cp] || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
    std::string x;
    kappa::tokenize::append_utf8(x, cp);
    // A single code point that NFKD leaves alone has no decomposition at all,
    // so the other three forms leave it alone too.
    if (normalize(x, NormalizationForm::kNFKD) != x && ++failures <= 20) {
      ADD_FAILURE() << "U+" << hex(x) << " changes";
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Normalize, Properties) {
  for (const auto& c : peers().at("cases")) {
    const std::string x = c.at("text").get<std::string>();
    const std::string nfc = normalize(x, NormalizationForm::kNFC);
    const std::string nfd = normalize(x, NormalizationForm::kNFD);
    const std::string nfkc = normalize(x, NormalizationForm::kNFKC);
    const std::string nfkd = normalize(x, NormalizationForm::kNFKD);
    ASSERT_EQ(normalize(nfd, NormalizationForm::kNFC), nfc) << hex(x);
    ASSERT_EQ(normalize(nfc, NormalizationForm::kNFD), nfd) << hex(x);
    ASSERT_EQ(normalize(nfkd, NormalizationForm::kNFKC), nfkc) << hex(x);
    ASSERT_EQ(normalize(nfc, NormalizationForm::kNFC), nfc) << hex(x);
    ASSERT_EQ(normalize(nfd, NormalizationForm::kNFD), nfd) << hex(x);
    ASSERT_EQ(normalize(nfkc, NormalizationForm::kNFKC), nfkc) << hex(x);
    ASSERT_EQ(normalize(nfkd, NormalizationForm::kNFKD), nfkd) << hex(x);
  }
}

// The cut at quick-check boundaries gives what normalizing the whole text in
// one piece gives, on all inputs joined (with and without separators).
TEST(Normalize, PiecesEqualWholeText) {
  std::string joined;
  std::string spaced;
  for (const auto& c : peers().at("cases")) {
    joined += c.at("text").get<std::string>();
    spaced += c.at("text").get<std::string>() + (joined.size() % 3 == 0 ? " " : "\xFF");
  }
  for (const std::string& text : {joined, spaced}) {
    for (NormalizationForm form : kForms) {
      std::string whole;
      std::u32string buf;
      kappa::tokenize::detail::nf::normalize_piece(text, form, whole, buf);
      EXPECT_EQ(normalize(text, form), whole) << static_cast<int>(form);
    }
  }
}

TEST(Normalize, InvalidBytesPassThrough) {
  const std::string s =
      "e\xCC\x81\xFF\xCC\x81"
      "a\xC3";
  EXPECT_EQ(normalize(s, NormalizationForm::kNFC),
            "\xC3\xA9\xFF\xCC\x81"
            "a\xC3");
  EXPECT_EQ(normalize("", NormalizationForm::kNFKC), "");
  EXPECT_EQ(normalize("plain ascii", NormalizationForm::kNFD), "plain ascii");
}

TEST(Normalize, HfTypes) {
  using kappa::tokenize::Lowercase;
  using kappa::tokenize::Prepend;
  using kappa::tokenize::Replace;
  using kappa::tokenize::Strip;
  // Rust's char::to_lowercase: no final-sigma context; U+0130 -> i + U+0307.
  EXPECT_EQ(Lowercase{}.apply("\xCE\xA3\xCE\x91\xCE\xA3"), "\xCF\x83\xCE\xB1\xCF\x83");
  EXPECT_EQ(Lowercase{}.apply("\xC4\xB0X"), "i\xCC\x87x");
  EXPECT_EQ((Strip{true, true}.apply("\xE3\x80\x80 a b\t\n")), "a b");
  EXPECT_EQ((Strip{false, true}.apply("  a  ")), "  a");
  EXPECT_EQ((Strip{true, false}.apply("  a  ")), "a  ");
  EXPECT_EQ((Strip{}.apply(" \xC2\x85 ")), "");
  EXPECT_EQ((Prepend{"_"}.apply("")), "");
  EXPECT_EQ((Prepend{"_"}.apply("a")), "_a");
  EXPECT_EQ((Replace{"aa", "b"}.apply("aaaaa")), "bba");
}

TEST(Normalize, BuilderErrors) {
  auto fails = [](const char* json, const char* fragment) {
    try {
      (void)normalizer_from_json(nlohmann::json::parse(json));
      ADD_FAILURE() << json << " did not throw";
    } catch (const kappa::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  fails(R"({"type": "BertNormalizer"})",
        "normalizer.type \"BertNormalizer\": unsupported normalizer");
  fails(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Nmt"}]})",
        "normalizer.normalizers[1].type \"Nmt\"");
  fails(R"({"type": "Replace", "pattern": {"Regex": "a|b"}, "content": " "})",
        "normalizer.pattern.Regex \"a|b\": only a literal text, `c{n,}` or `c+` is supported");
  fails(R"({"type": "Replace", "pattern": {"Regex": " {0,}"}, "content": " "})", "\" {0,}\"");
  fails(R"({"type": "Prepend"})", "normalizer: missing key \"prepend\"");
  fails(R"({"type": "Strip", "strip_left": 1})", "normalizer.strip_left: expected true or false");
  fails(R"({"type": "\u001b[2J"})", "\\x1b[2J");
  fails(R"([1])", "normalizer: expected an object or null");
  EXPECT_TRUE(normalizer_from_json(nullptr).empty());
  const auto literal = normalizer_from_json(
      nlohmann::json::parse(R"({"type": "Replace", "pattern": {"Regex": "ab"}, "content": "-"})"));
  EXPECT_EQ(literal.apply("xaby"), "x-y");
  // T5's " {2,}" -> " ": runs of two or more spaces, whole; and "x+".
  const auto runs = normalizer_from_json(nlohmann::json::parse(
      R"({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "})"));
  EXPECT_EQ(runs.apply("a b  c     d "), "a b c d ");
  const auto plus = normalizer_from_json(
      nlohmann::json::parse(R"({"type": "Replace", "pattern": {"Regex": "é+"}, "content": "E"})"));
  EXPECT_EQ(plus.apply("éaééb"), "EaEb");
}

}  // namespace normalize_test
}  // namespace
