// Guides are client input: the first byte (mod 5) picks regex, JSON schema, free-form JSON, an
// EBNF grammar or a structural tag; the rest up to a NUL is the guide, and the bytes after it are
// stepped through the compiled automaton (and masks computed over a small vocabulary) after a
// successful compile.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "guided/grammar.h"
#include "guided/guide.h"
#include "guided/json_matcher.h"
#include "guided/json_schema.h"
#include "guided/regex_dfa.h"
#include "guided/structural_tag.h"

using namespace inflight::guided;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int kind = data[0] % 5;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string guide = rest.substr(0, nul);
  const std::string text = nul == std::string::npos ? std::string() : rest.substr(nul + 1);
  if (kind == 3) {
    auto g = Grammar::Parse(guide);
    if (!g.ok()) return 0;
    GrammarState st(g->get());
    for (char c : text) {
      if (!st.Step(static_cast<uint8_t>(c))) break;
      (void)st.Accepting();
      (void)st.Key();
    }
  } else if (kind == 2) {
    JsonState st;
    for (char c : guide + text) {
      if (!st.Step(static_cast<uint8_t>(c))) break;
    }
    (void)st.Key();
  } else {
    std::string pattern = guide;
    if (kind == 1 || kind == 4) {
      auto r = kind == 1 ? JsonSchemaToRegex(guide) : StructuralTagToRegex(guide);
      if (!r.ok()) return 0;
      pattern = *r;
    }
    auto dfa = RegexDfa::Compile(pattern);
    if (!dfa.ok()) return 0;
    int32_t s = (*dfa)->start();
    for (char c : text) {
      s = (*dfa)->Next(s, static_cast<uint8_t>(c));
      if (s == RegexDfa::kDead) break;
      (void)(*dfa)->Accepting(s);
      (void)(*dfa)->CanContinue(s);
    }
  }
  // Token masks over a small vocabulary of pieces of the input itself.
  std::vector<std::string> vocab = {"",  "{", "}", "[", "]",    "\"",  ",",
                                    ":", "a", "0", " ", "true", "null"};
  for (size_t i = 0; i + 3 <= text.size() && vocab.size() < 40; i += 3)
    vocab.push_back(text.substr(i, 3));
  auto v = std::make_shared<GuideVocabulary>(vocab);
  const GuideType type = kind == 0   ? GuideType::kRegex
                         : kind == 1 ? GuideType::kJsonSchema
                         : kind == 2 ? GuideType::kJson
                         : kind == 3 ? GuideType::kEbnf
                                     : GuideType::kStructuralTag;
  auto g = Guide::Compile(type, guide, v);
  if (!g.ok()) return 0;
  auto c = (*g)->NewConstraint();
  std::vector<float> logits(vocab.size());
  for (int step = 0; step < 16 && !c->Terminated(); ++step) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    if (c->Mask(logits.data(), static_cast<int32_t>(vocab.size()), 0) == 0) break;
    for (size_t t = 1; t < vocab.size(); ++t) {
      if (logits[(t * 7 + step) % vocab.size()] == 0.0f && (t * 7 + step) % vocab.size() != 0) {
        c->Advance(static_cast<int32_t>((t * 7 + step) % vocab.size()));
        break;
      }
    }
  }
  return 0;
}
