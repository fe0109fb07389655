#include "guided/structural_tag.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "base/json_depth.h"
#include "guided/json_schema.h"
#include "guided/literal_scan.h"
#include "guided/regex_dfa.h"

namespace inflight::guided {
namespace {

// ordered_json: a schema is re-dumped with its keys in the client's order (json_schema.h
// emits properties in that order).
using json = nlohmann::ordered_json;

// Arrays and objects nested in the whole document, checked on the text before anything
// recurses over it (dumping a schema does).
constexpr int kMaxJsonNesting = 256;

Status Error(const std::string& what) { return InvalidArgumentError("structural_tag: " + what); }

// A string for an error message (JSON-quoted, so newlines show).
std::string Quoted(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// What comes after a format in its scope: another format (free text could not tell where it
// ends), the end of the output, or a literal (the enclosing tag's end, from `path`).
struct Follow {
  enum Kind { kFormat, kOutputEnd, kLiteral } kind;
  std::string literal;
  std::string path;
};

// A (?~...) or (?*...) group over the literals.
std::string ScanGroup(char op, const std::vector<std::string>& literals) {
  std::string out = std::string("(?") + op;
  for (size_t i = 0; i < literals.size(); ++i) {
    if (i > 0) out += '|';
    out += RegexEscape(literals[i]);
  }
  return out + ")";
}

// Whether text can end at the first occurrence of literals[0] with no other literal ending
// before it: no other literal occurs in literals[0] short of its last byte.
bool ExitReachable(const std::vector<std::string>& literals) {
  const std::string_view head(literals[0].data(), literals[0].size() - 1);
  for (size_t i = 1; i < literals.size(); ++i) {
    if (head.find(literals[i]) != std::string_view::npos) return false;
  }
  return true;
}

// A tag read: its body is the regex of its content and end.
struct Tag {
  std::string path, begin, end, body;
};

Status TooLarge(const std::string& path) {
  return Error("the guide compiles to over " + std::to_string(kMaxStructuralTagPatternBytes) +
               " bytes of regular expression (at " + path + ")");
}

class Compiler {
 public:
  Status Format(const json& f, const std::string& path, int depth, const Follow& follow,
                std::string* out);

 private:
  Status Fmt(const std::string& type, const json& f, const std::string& path, int depth,
             const Follow& follow, std::string* out);
  Status JsonSchema(const json& f, const std::string& path, std::string* out);
  Status Regex(const json& f, const std::string& path, std::string* out);
  Status Elements(const json& f, const std::string& path, int depth, const Follow& follow,
                  bool alternatives, std::string* out);
  Status AnyText(const json& f, const std::string& path, const Follow& follow, std::string* out);
  Status TagsWithSeparator(const json& f, const std::string& path, int depth, const Follow& follow,
                           std::string* out);
  Status TriggeredTags(const json& f, const std::string& path, int depth, const Follow& follow,
                       std::string* out);

  Status ReadTag(const json& t, const std::string& path, int depth, bool listed, Tag* tag);
  Status ReadTags(const json& f, const std::string& path, int depth, std::vector<Tag>* tags);
  Status Triggers(const json& f, const std::string& path, std::vector<std::string>* triggers);
  // Alternatives ('|' between them, ungrouped), one per trigger: the text through it, then
  // the rest of a tag it starts.
  Status Segments(const std::vector<std::string>& triggers, const std::vector<std::string>& stops,
                  const std::vector<Tag>& tags, const std::string& path, std::string* out);
  // (?:...) of the tags whose begin starts with `trigger`, the trigger itself left out.
  Status AnyTag(const std::vector<Tag>& tags, const std::string& trigger, const std::string& path,
                std::string* out);
  Status String(const json& f, const char* key, const std::string& path, std::string* out);
  Status String(const json& v, const std::string& path, std::string* out);
  Status Flag(const json& f, const char* key, const std::string& path, bool* out);
  StatusOr<const json*> List(const json& f, const char* key, const std::string& path);
  Status Unsupported(const json& f, const std::string& path,
                     std::initializer_list<const char*> keys);
  Status Free(const Follow& follow, const std::string& path, const char* type);

  int64_t literal_bytes_ = 0;
};

Status Compiler::Format(const json& f, const std::string& path, int depth, const Follow& follow,
                        std::string* out) {
  if (depth > kMaxStructuralTagDepth) {
    return Error(path + " nests formats deeper than " + std::to_string(kMaxStructuralTagDepth) +
                 " levels");
  }
  if (!f.is_object()) return Error(path + " must be an object");
  auto type = f.find("type");
  if (type == f.end()) return Error(path + ".type is missing");
  if (!type->is_string()) return Error(path + ".type must be a string");
  RETURN_IF_ERROR(Fmt(type->get<std::string>(), f, path, depth, follow, out));
  if (out->size() > kMaxStructuralTagPatternBytes) return TooLarge(path);
  return OkStatus();
}

Status Compiler::Fmt(const std::string& type, const json& f, const std::string& path, int depth,
                     const Follow& follow, std::string* out) {
  const std::string end = follow.kind == Follow::kLiteral ? RegexEscape(follow.literal) : "";
  if (type == "const_string") {
    std::string value;
    RETURN_IF_ERROR(String(f, "value", path, &value));
    *out += RegexEscape(value) + end;
  } else if (type == "json_schema") {
    RETURN_IF_ERROR(JsonSchema(f, path, out));
    *out += end;
  } else if (type == "regex") {
    RETURN_IF_ERROR(Regex(f, path, out));
    *out += end;
  } else if (type == "sequence" || type == "or") {
    return Elements(f, path, depth, follow, type == "or", out);
  } else if (type == "tag") {
    Tag t;
    RETURN_IF_ERROR(ReadTag(f, path, depth, false, &t));
    *out += RegexEscape(t.begin) + t.body + end;
  } else if (type == "any_text") {
    return AnyText(f, path, follow, out);
  } else if (type == "tags_with_separator") {
    return TagsWithSeparator(f, path, depth, follow, out);
  } else if (type == "triggered_tags") {
    return TriggeredTags(f, path, depth, follow, out);
  } else {
    static const std::set<std::string> kUnsupported = {
        "grammar",       "optional",      "plus",     "star",       "repeat",
        "token",         "exclude_token", "dispatch", "any_tokens", "token_triggered_tags",
        "token_dispatch"};
    return Error(path + ".type '" + type + "' is " +
                 (kUnsupported.count(type) ? "not supported" : "not a structural tag format") +
                 " (const_string, json_schema, regex, sequence, or, tag, tags_with_separator, "
                 "any_text and triggered_tags are)");
  }
  return OkStatus();
}

Status Compiler::JsonSchema(const json& f, const std::string& path, std::string* out) {
  RETURN_IF_ERROR(Unsupported(f, path, {"any_order"}));
  if (auto style = f.find("style"); style != f.end() && *style != "json") {
    return Error(path + ".style: only \"json\" is supported");
  }
  auto schema = f.find("json_schema");
  if (schema == f.end()) return Error(path + ".json_schema is missing");
  if (!schema->is_object() && !schema->is_boolean()) {
    return Error(path + ".json_schema must be an object");
  }
  auto regex = JsonSchemaToRegex(schema->dump());
  if (!regex.ok()) return Error(path + ".json_schema: " + regex.status().message());
  *out += "(?:" + *regex + ")";
  return OkStatus();
}

Status Compiler::Regex(const json& f, const std::string& path, std::string* out) {
  auto pattern = f.find("pattern");
  if (pattern == f.end()) return Error(path + ".pattern is missing");
  if (!pattern->is_string()) return Error(path + ".pattern must be a string");
  std::string p = pattern->get<std::string>();
  // Anchors at its ends say what a guide's match always is: the whole of this part.
  if (!p.empty() && p[0] == '^') p.erase(0, 1);
  size_t slashes = 0;
  while (slashes + 1 < p.size() && p[p.size() - 2 - slashes] == '\\') ++slashes;
  if (!p.empty() && p.back() == '$' && slashes % 2 == 0) p.pop_back();
  // A pattern that parses alone stays inside its group (no ')' or '|' reaches out of it);
  // checked embedded too, for the anchors only its ends may hold.
  const std::string group = "(?:" + p + ")";
  for (const std::string& text : {p, group}) {
    if (Status s = RegexDfa::Check(text); !s.ok()) return Error(path + ".pattern: " + s.message());
  }
  *out += group;
  return OkStatus();
}

Status Compiler::Elements(const json& f, const std::string& path, int depth, const Follow& follow,
                          bool alternatives, std::string* out) {
  ASSIGN_OR_RETURN(const json* elements, List(f, "elements", path));
  const size_t n = elements->size();
  *out += "(?:";
  for (size_t i = 0; i < n; ++i) {
    const std::string at = path + ".elements[" + std::to_string(i) + "]";
    if (alternatives && i > 0) *out += "|";
    // In a sequence only the last element reaches what follows it.
    const Follow inner = alternatives || i + 1 == n ? follow : Follow{Follow::kFormat, "", ""};
    RETURN_IF_ERROR(Format((*elements)[i], at, depth + 1, inner, out));
  }
  *out += ")";
  return OkStatus();
}

Status Compiler::AnyText(const json& f, const std::string& path, const Follow& follow,
                         std::string* out) {
  RETURN_IF_ERROR(Unsupported(f, path, {"excludes", "max_tokens", "max_chars"}));
  RETURN_IF_ERROR(Free(follow, path, "any_text"));
  if (follow.kind == Follow::kLiteral) {
    if (static_cast<int64_t>(follow.literal.size()) > kMaxScanLiteralBytes) {
      return Error(follow.path + " ends the any_text at " + path + " and holds " +
                   std::to_string(follow.literal.size()) + " bytes; at most " +
                   std::to_string(kMaxScanLiteralBytes));
    }
    *out += ScanGroup('*', {follow.literal});
  } else {
    *out += "[\\s\\S]*";
  }
  return OkStatus();
}

Status Compiler::TagsWithSeparator(const json& f, const std::string& path, int depth,
                                   const Follow& follow, std::string* out) {
  std::vector<Tag> tags;
  RETURN_IF_ERROR(ReadTags(f, path, depth, &tags));
  std::string separator;
  bool at_least_one = false, stop_after_first = false;
  RETURN_IF_ERROR(String(f, "separator", path, &separator));
  RETURN_IF_ERROR(Flag(f, "at_least_one", path, &at_least_one));
  RETURN_IF_ERROR(Flag(f, "stop_after_first", path, &stop_after_first));
  std::string one;
  RETURN_IF_ERROR(AnyTag(tags, "", path, &one));
  std::string list = stop_after_first ? one : one + "(?:" + RegexEscape(separator) + one + ")*";
  *out += at_least_one ? list : "(?:" + list + ")?";
  if (follow.kind == Follow::kLiteral) *out += RegexEscape(follow.literal);
  return OkStatus();
}

Status Compiler::TriggeredTags(const json& f, const std::string& path, int depth,
                               const Follow& follow, std::string* out) {
  RETURN_IF_ERROR(Unsupported(f, path, {"excludes"}));
  RETURN_IF_ERROR(Free(follow, path, "triggered_tags"));
  std::vector<std::string> triggers;
  RETURN_IF_ERROR(Triggers(f, path, &triggers));
  std::vector<Tag> tags;
  RETURN_IF_ERROR(ReadTags(f, path, depth, &tags));
  bool at_least_one = false, stop_after_first = false;
  RETURN_IF_ERROR(Flag(f, "at_least_one", path, &at_least_one));
  RETURN_IF_ERROR(Flag(f, "stop_after_first", path, &stop_after_first));
  for (const Tag& t : tags) {
    bool started = false;
    for (const std::string& tr : triggers) started = started || t.begin.starts_with(tr);
    if (!started) return Error(t.path + ".begin must start with one of " + path + ".triggers");
  }
  // The free text stops at every trigger and at the enclosing end.
  std::vector<std::string> stops = triggers;
  if (follow.kind == Follow::kLiteral) stops.push_back(follow.literal);
  int64_t stop_bytes = 0;
  for (const std::string& s : stops) stop_bytes += static_cast<int64_t>(s.size());
  if (stop_bytes > kMaxScanLiteralBytes) {
    return Error(path + ": its triggers and end hold " + std::to_string(stop_bytes) +
                 " bytes; at most " + std::to_string(kMaxScanLiteralBytes));
  }
  std::string segments;
  RETURN_IF_ERROR(Segments(triggers, stops, tags, path, &segments));
  // The text after the last tag.
  std::string tail, end;
  if (follow.kind == Follow::kLiteral) {
    std::vector<std::string> scan = {follow.literal};
    scan.insert(scan.end(), triggers.begin(), triggers.end());
    if (!ExitReachable(scan)) {
      return Error(path + ": its text can never reach the end " + Quoted(follow.literal) + " (" +
                   follow.path + "): a trigger occurs in it");
    }
    tail = ScanGroup('*', scan);
    end = RegexEscape(follow.literal);
  } else {
    tail = ScanGroup('~', triggers);
  }
  const std::string more = segments.empty() ? "" : "(?:" + segments + ")*";
  if (at_least_one) {
    RETURN_IF_ERROR(AnyTag(tags, "", path, out));
    *out += stop_after_first ? end : more + tail;
  } else if (stop_after_first) {
    *out += segments.empty() ? tail : "(?:" + tail + "|(?:" + segments + ")" + end + ")";
  } else {
    *out += more + tail;
  }
  return OkStatus();
}

Status Compiler::Triggers(const json& f, const std::string& path,
                          std::vector<std::string>* triggers) {
  ASSIGN_OR_RETURN(const json* list, List(f, "triggers", path));
  for (size_t j = 0; j < list->size(); ++j) {
    const std::string at = path + ".triggers[" + std::to_string(j) + "]";
    std::string t;
    RETURN_IF_ERROR(String((*list)[j], at, &t));
    if (t.empty()) return Error(at + " must not be empty");
    if (std::find(triggers->begin(), triggers->end(), t) == triggers->end()) {
      triggers->push_back(t);
    }
  }
  return OkStatus();
}

// Text, then a trigger, then the rest of a tag it starts. A trigger that holds another stop
// short of its end starts nothing (the other always interrupts it first), nor does one no tag
// begins with (it only stops the text).
Status Compiler::Segments(const std::vector<std::string>& triggers,
                          const std::vector<std::string>& stops, const std::vector<Tag>& tags,
                          const std::string& path, std::string* out) {
  for (const std::string& tr : triggers) {
    std::vector<std::string> scan = {tr};
    for (const std::string& s : stops) {
      if (s != tr) scan.push_back(s);
    }
    const bool starts_tag = std::any_of(tags.begin(), tags.end(),
                                        [&](const Tag& t) { return t.begin.starts_with(tr); });
    if (!starts_tag || !ExitReachable(scan)) continue;
    if (!out->empty()) *out += "|";
    *out += ScanGroup('*', scan);
    RETURN_IF_ERROR(AnyTag(tags, tr, path, out));
  }
  return OkStatus();
}

Status Compiler::AnyTag(const std::vector<Tag>& tags, const std::string& trigger,
                        const std::string& path, std::string* out) {
  *out += "(?:";
  bool first = true;
  for (const Tag& t : tags) {
    if (!t.begin.starts_with(trigger)) continue;
    if (!first) *out += "|";
    first = false;
    *out += RegexEscape(std::string_view(t.begin).substr(trigger.size())) + t.body;
    if (out->size() > kMaxStructuralTagPatternBytes) return TooLarge(path);
  }
  *out += ")";
  return OkStatus();
}

Status Compiler::ReadTag(const json& t, const std::string& path, int depth, bool listed, Tag* tag) {
  if (!t.is_object()) return Error(path + " must be an object");
  if (listed) {
    auto type = t.find("type");
    if (type != t.end() && *type != "tag") return Error(path + ".type must be \"tag\"");
  }
  tag->path = path;
  for (const char* key : {"begin", "end"}) {
    auto v = t.find(key);
    if (v != t.end() && (v->is_object() || v->is_array())) {
      return Error(path + "." + key + " must be a string (token and list forms are not supported)");
    }
  }
  RETURN_IF_ERROR(String(t, "begin", path, &tag->begin));
  RETURN_IF_ERROR(String(t, "end", path, &tag->end));
  auto content = t.find("content");
  if (content == t.end()) return Error(path + ".content is missing");
  return Format(*content, path + ".content", depth + 1,
                Follow{Follow::kLiteral, tag->end, path + ".end"}, &tag->body);
}

Status Compiler::ReadTags(const json& f, const std::string& path, int depth,
                          std::vector<Tag>* tags) {
  ASSIGN_OR_RETURN(const json* list, List(f, "tags", path));
  tags->resize(list->size());
  size_t bytes = 0;
  for (size_t k = 0; k < list->size(); ++k) {
    Tag& t = (*tags)[k];
    RETURN_IF_ERROR(
        ReadTag((*list)[k], path + ".tags[" + std::to_string(k) + "]", depth, true, &t));
    bytes += t.begin.size() * 2 + t.body.size();
    if (bytes > kMaxStructuralTagPatternBytes) return TooLarge(path);
  }
  return OkStatus();
}

Status Compiler::String(const json& f, const char* key, const std::string& path, std::string* out) {
  auto v = f.find(key);
  if (v == f.end()) return Error(path + "." + key + " is missing");
  return String(*v, path + "." + key, out);
}

Status Compiler::String(const json& v, const std::string& path, std::string* out) {
  if (!v.is_string()) return Error(path + " must be a string");
  *out = v.get<std::string>();
  literal_bytes_ += static_cast<int64_t>(out->size());
  if (literal_bytes_ > kMaxStructuralTagLiteralBytes) {
    return Error("the strings of the guide hold over " +
                 std::to_string(kMaxStructuralTagLiteralBytes) + " bytes (at " + path + ")");
  }
  return OkStatus();
}

Status Compiler::Flag(const json& f, const char* key, const std::string& path, bool* out) {
  auto v = f.find(key);
  if (v == f.end() || v->is_null()) return OkStatus();
  if (!v->is_boolean()) return Error(path + "." + key + " must be a boolean");
  *out = v->get<bool>();
  return OkStatus();
}

StatusOr<const json*> Compiler::List(const json& f, const char* key, const std::string& path) {
  auto v = f.find(key);
  if (v == f.end()) return Error(path + "." + key + " is missing");
  if (!v->is_array()) return Error(path + "." + key + " must be an array");
  if (v->empty()) return Error(path + "." + key + " must not be empty");
  if (v->size() > kMaxStructuralTagItems) {
    return Error(path + "." + key + " has " + std::to_string(v->size()) + " entries; at most " +
                 std::to_string(kMaxStructuralTagItems));
  }
  return &*v;
}

// Fields this compiler does not implement are refused unless they hold their default.
Status Compiler::Unsupported(const json& f, const std::string& path,
                             std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto v = f.find(key);
    if (v == f.end() || v->is_null() || *v == false || (v->is_array() && v->empty())) continue;
    return Error(path + "." + key + " is not supported");
  }
  return OkStatus();
}

// Free text needs a known end: an enclosing tag's (not empty) or the output's.
Status Compiler::Free(const Follow& follow, const std::string& path, const char* type) {
  if (follow.kind == Follow::kFormat) {
    return Error(path + ": " + type +
                 " must end the output or a tag's content (nothing would tell where its text "
                 "ends before the next format)");
  }
  if (follow.kind == Follow::kLiteral && follow.literal.empty()) {
    return Error(follow.path + " must not be empty: it ends the " + type + " at " + path);
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::string> StructuralTagToRegex(std::string_view guide) {
  if (JsonNestingDepth(guide) > kMaxJsonNesting) {
    return Error("the guide nests arrays and objects deeper than " +
                 std::to_string(kMaxJsonNesting) + " levels");
  }
  const json doc = json::parse(guide, nullptr, false);
  if (doc.is_discarded()) return Error("the guide is not valid JSON");
  if (!doc.is_object()) return Error("the guide must be a JSON object");
  if (auto type = doc.find("type"); type != doc.end() && *type != "structural_tag") {
    return Error("type must be \"structural_tag\"");
  }
  Compiler compiler;
  std::string out;
  const Follow output_end{Follow::kOutputEnd, "", ""};
  auto format = doc.find("format");
  if (format == doc.end()) return Error("format is missing");
  RETURN_IF_ERROR(compiler.Format(*format, "format", 0, output_end, &out));
  return out;
}

}  // namespace inflight::guided
