// Structural tags (xgrammar's format; TensorRT-LLM's guided_decoding_guide_type
// "structural_tag" hands it to xgrammar) as a regular expression for RegexDfa, as
// json_schema.h does for schemas. The guide is {"type": "structural_tag", "format": FORMAT}
// ("type" may be left out), FORMAT one of:
//   const_string {value}          exactly the value
//   json_schema {json_schema}     a JSON value valid against the schema (json_schema.h; style
//                                 "json" and any_order false only)
//   regex {pattern}               the pattern (regex_dfa.h)
//   sequence {elements}           the elements one after another
//   or {elements}                 one of the elements
//   tag {begin, content, end}     begin, the content, end (begin and end strings)
//   tags_with_separator {tags, separator, at_least_one, stop_after_first}
//                                 tags with the separator between them and nothing else: zero
//                                 or more (at_least_one: one or more; stop_after_first: at most
//                                 one)
//   any_text {}                   free text
//   triggered_tags {triggers, tags, at_least_one, stop_after_first}
//                                 free text until a trigger, then a tag whose begin starts with
//                                 it, then free text again; at_least_one: it starts with a tag
//                                 (no text before it); stop_after_first: it ends after its first
//                                 tag. Every tag's begin starts with a trigger.
// Free text (any_text, triggered_tags) ends where the enclosing tag's end first occurs (the
// text before it never holds it), or with the output; placed anywhere else (before another
// element of a sequence) it is refused. triggered_tags' free text never holds a trigger: a
// trigger always starts a tag.
// Not supported (refused by name): grammar, optional, plus, star, repeat, dispatch, the token
// formats, excludes, max_tokens / max_chars, token or list begins and ends, and xgrammar's
// older {"structures": [...], "triggers": [...]} form.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace inflight::guided {

// Bounds on what a client's structural tag may cost: nesting of formats, entries of one list
// (elements, tags, triggers), bytes of all its strings (values, begins, ends, separators,
// triggers), and the regular expression it compiles to (RegexDfa's own bounds then apply).
inline constexpr int kMaxStructuralTagDepth = 32;
inline constexpr size_t kMaxStructuralTagItems = 1024;
inline constexpr int64_t kMaxStructuralTagLiteralBytes = 65536;
inline constexpr size_t kMaxStructuralTagPatternBytes = size_t{1} << 20;

// INVALID_ARGUMENT naming the place ("structural_tag: format.tags[1].begin must be a string").
StatusOr<std::string> StructuralTagToRegex(std::string_view guide);

}  // namespace inflight::guided
