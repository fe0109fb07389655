#include "chat/output_parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/json_depth.h"

namespace inflight::chat {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr size_t kMaxHeaderBytes = 4096;  // a call header or harmony header longer is text
constexpr int kMaxCallNesting = 64;       // a call parsed whole nests at most this deep

bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t SkipWs(std::string_view s, size_t i) {
  while (i < s.size() && IsWs(s[i])) ++i;
  return i;
}

// The earliest full marker in `s` (pos, index into markers), or pos = npos and `safe`: how
// much of s cannot be the start of a marker (all of it when `final`).
struct MarkerScan {
  size_t pos = std::string_view::npos;
  size_t which = 0;
  size_t safe = 0;
};
MarkerScan ScanMarkers(std::string_view s, const std::vector<std::string_view>& markers,
                       bool final) {
  MarkerScan scan;
  for (size_t m = 0; m < markers.size(); ++m) {
    const size_t at = s.find(markers[m]);
    if (at < scan.pos) {
      scan.pos = at;
      scan.which = m;
    }
  }
  if (scan.pos != std::string_view::npos || final) {
    scan.safe = std::min(scan.pos, s.size());
    return scan;
  }
  size_t hold = 0;
  for (std::string_view m : markers) {
    for (size_t k = std::min(m.size() - 1, s.size()); k > hold; --k) {
      if (s.substr(s.size() - k) == m.substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  scan.safe = s.size() - hold;
  return scan;
}

enum class Match { kYes, kMore, kNo };

// Matches `literal` at s[*i]; kMore when s ends inside it.
Match Literal(std::string_view s, size_t* i, std::string_view literal) {
  const size_t n = std::min(literal.size(), s.size() - *i);
  if (s.substr(*i, n) != literal.substr(0, n)) return Match::kNo;
  if (n < literal.size()) return Match::kMore;
  *i += n;
  return Match::kYes;
}

// `{"name": "f", "arguments": ` (or "parameters"), whitespace allowed between the tokens.
Match CallHeader(std::string_view s, std::string* name, size_t* len) {
  size_t i = SkipWs(s, 0);
  auto step = [&](std::string_view lit) {
    i = SkipWs(s, i);
    if (i == s.size()) return Match::kMore;
    return Literal(s, &i, lit);
  };
  for (std::string_view lit : {"{", "\"name\"", ":"}) {
    if (Match m = step(lit); m != Match::kYes) return m;
  }
  i = SkipWs(s, i);
  if (i == s.size()) return Match::kMore;
  if (s[i] != '"') return Match::kNo;
  size_t end = i + 1;
  while (end < s.size() && s[end] != '"') end += s[end] == '\\' ? 2 : 1;
  if (end >= s.size()) return end - i > 256 ? Match::kNo : Match::kMore;
  const json decoded = json::parse(s.substr(i, end + 1 - i), nullptr, false);
  if (!decoded.is_string()) return Match::kNo;
  *name = decoded.get<std::string>();
  i = end + 1;
  if (Match m = step(","); m != Match::kYes) return m;
  i = SkipWs(s, i);
  if (i == s.size()) return Match::kMore;
  Match key = Literal(s, &i, "\"arguments\"");
  if (key == Match::kNo) key = Literal(s, &i, "\"parameters\"");
  if (key != Match::kYes) return key;
  if (Match m = step(":"); m != Match::kYes) return m;
  i = SkipWs(s, i);
  if (i == s.size()) return Match::kMore;
  if (s[i] != '{') return Match::kNo;  // arguments as a string etc.: parsed whole
  *len = i;
  return Match::kYes;
}

// Finds where one JSON value ends in text that arrives in pieces.
class JsonValueScanner {
 public:
  // How many bytes of `s` belong to the value (all of them while it goes on).
  size_t Feed(std::string_view s) {
    size_t i = 0;
    for (; i < s.size() && !done_; ++i) {
      const char c = s[i];
      if (in_string_) {
        if (escape_) {
          escape_ = false;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          in_string_ = false;
          done_ = depth_ == 0;
        }
      } else if (scalar_) {
        if (IsWs(c) || c == ',' || c == '}' || c == ']' || c == ';') {
          done_ = true;
          return i;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if (c == '}' || c == ']') {
        done_ = --depth_ <= 0;
      } else if (depth_ == 0 && !IsWs(c)) {
        scalar_ = true;
      }
    }
    return i;
  }
  bool done() const { return done_; }

 private:
  int depth_ = 0;
  bool in_string_ = false, escape_ = false, scalar_ = false, done_ = false;
};

}  // namespace

class OutputParser::Impl {
 public:
  Impl(ChatFormat format, ParserOptions options)
      : f_(std::move(format)), o_(std::move(options)), prefix_len_(o_.output_prefix.size()) {
    buf_ = o_.output_prefix;
    if (!o_.new_call_id) {
      o_.new_call_id = [n = 0]() mutable { return "call_" + std::to_string(n++); };
    }
    if (f_.tools == ToolSyntax::kHarmony) {
      state_ = State::kHarmonyHeader;
    } else if (o_.reasoning && o_.starts_in_reasoning &&
               f_.reasoning == ReasoningSyntax::kThinkTags) {
      state_ = State::kReasoning;
      reasoning_from_ = 0;
    }
  }

  OutputDelta Add(std::string_view text) {
    buf_ += text;
    OutputDelta d;
    while (Step(&d)) {
    }
    return d;
  }

  OutputDelta Finish() {
    final_ = true;
    OutputDelta d;
    while (Step(&d)) {
    }
    if (reasoning_from_) EndReasoning();
    return d;
  }

  std::vector<ToolCall> calls_;
  std::vector<std::pair<size_t, size_t>> reasoning_ranges_;

 private:
  enum class State {
    kStart,           // before the answer: <think>, or Llama 3's calls
    kText,            // the answer, watching for call markers
    kReasoning,       // inside <think>
    kAfterReasoning,  // whitespace after </think>
    kMistralOpen,     // after [TOOL_CALLS]: "[" (a list) or a name and [ARGS]
    kCallHeader,      // a call object's header
    kCallArgs,        // its arguments, streamed
    kCallTail,        // what closes the call
    kBuffered,        // a call written another way, parsed whole when it closes
    kHarmonyHeader,   // <|start|>assistant<|channel|>... up to <|message|>
    kHarmonyBody,     // a harmony message's text
  };
  enum class Dest { kContent, kReasoning, kArguments };

  size_t Offset() const {  // output offset of buf_'s start
    return consumed_ > prefix_len_ ? consumed_ - prefix_len_ : 0;
  }
  void Consume(size_t n) {
    buf_.erase(0, n);
    consumed_ += n;
  }
  void EndReasoning() {
    reasoning_ranges_.emplace_back(*reasoning_from_, std::max(*reasoning_from_, Offset()));
    reasoning_from_.reset();
  }
  bool Known(const std::string& name) const {
    return std::find(o_.tool_names.begin(), o_.tool_names.end(), name) != o_.tool_names.end();
  }
  void StartCall(OutputDelta* d, const std::string& name) {
    calls_.push_back({o_.new_call_id(), name, ""});
    d->tool_calls.push_back(
        {static_cast<int32_t>(calls_.size() - 1), calls_.back().id, name, std::string()});
  }
  void Arguments(OutputDelta* d, std::string_view s) {
    if (s.empty()) return;
    calls_.back().arguments += s;
    const int32_t index = static_cast<int32_t>(calls_.size() - 1);
    if (d->tool_calls.empty() || d->tool_calls.back().index != index)
      d->tool_calls.push_back({index, "", "", ""});
    d->tool_calls.back().arguments += s;
  }
  void Emit(OutputDelta* d, Dest dest, std::string_view s) {
    if (dest == Dest::kContent) {
      // Whitespace between and after calls is not an answer (it waits for text).
      if (calls_.empty()) {
        d->content += s;
      } else {
        // Sent up to its last non-space byte: trailing whitespace waits, however it was cut.
        pending_ws_ += s;
        const size_t last = pending_ws_.find_last_not_of(" \n\t\r");
        if (last != std::string::npos) {
          d->content += pending_ws_.substr(0, last + 1);
          pending_ws_.erase(0, last + 1);
        }
      }
    }
    if (dest == Dest::kReasoning) d->reasoning += s;
    if (dest == Dest::kArguments) Arguments(d, s);
  }

  // Text up to the first of `markers` goes to `dest`; returns the marker's index, or -1 when
  // none is complete yet (what may start one waits).
  int TextUntil(OutputDelta* d, Dest dest, const std::vector<std::string_view>& markers,
                bool* progressed) {
    const MarkerScan scan = ScanMarkers(buf_, markers, final_);
    if (scan.safe > 0) {
      Emit(d, dest, std::string_view(buf_).substr(0, scan.safe));
      Consume(scan.safe);
      *progressed = true;
    }
    if (scan.pos == std::string_view::npos) return -1;
    Consume(markers[scan.which].size());
    *progressed = true;
    return static_cast<int>(scan.which);
  }

  std::vector<std::string_view> TextMarkers() const {
    if (!o_.tools) return {};
    if (f_.tools == ToolSyntax::kHermes) return {kHermesOpen};
    if (f_.tools == ToolSyntax::kMistral) return {kMistralCalls};
    return {};
  }

  bool Step(OutputDelta* d) {
    bool progressed = false;
    switch (state_) {
      case State::kStart: {
        const size_t i = SkipWs(buf_, 0);
        if (i == buf_.size() && !final_) return false;
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (o_.reasoning && f_.reasoning == ReasoningSyntax::kThinkTags && !thought_) {
          const size_t n = std::min(rest.size(), kThinkOpen.size());
          if (rest.substr(0, n) == kThinkOpen.substr(0, n)) {
            if (n < kThinkOpen.size()) {
              if (!final_) return false;
            } else {
              reasoning_from_ = Offset() + i;
              Consume(i + kThinkOpen.size());
              state_ = State::kReasoning;
              return true;
            }
          }
        }
        if (o_.tools && f_.tools == ToolSyntax::kLlama3 && !rest.empty() && rest[0] == '{') {
          open_text_.clear();
          state_ = State::kCallHeader;
          return true;
        }
        state_ = State::kText;
        return true;
      }
      case State::kText: {
        const int m = TextUntil(d, Dest::kContent, TextMarkers(), &progressed);
        if (m < 0) return progressed;
        if (f_.tools == ToolSyntax::kMistral) {
          open_text_ = std::string(kMistralCalls);
          state_ = State::kMistralOpen;
        } else {
          open_text_ = std::string(kHermesOpen);
          state_ = State::kCallHeader;
        }
        return true;
      }
      case State::kReasoning: {
        if (TextUntil(d, Dest::kReasoning, {kThinkClose}, &progressed) < 0) return progressed;
        EndReasoning();
        thought_ = true;
        state_ = State::kAfterReasoning;
        return true;
      }
      case State::kAfterReasoning: {
        const size_t i = SkipWs(buf_, 0);
        Consume(i);
        if (buf_.empty() && !final_) return i > 0;
        state_ = State::kStart;
        return true;
      }
      case State::kMistralOpen: {
        const size_t i = SkipWs(buf_, 0);
        if (i == buf_.size() && !final_) return false;
        if (i < buf_.size() && buf_[i] == '[') {
          Consume(i + 1);
          open_text_ += std::string(i, ' ') + "[";
          in_list_ = true;
          state_ = State::kCallHeader;
          return true;
        }
        // [TOOL_CALLS]name[ARGS]{...}
        size_t args = buf_.find(kMistralArgs);
        if (args != std::string::npos && args + kMistralArgs.size() > kMaxHeaderBytes)
          args = std::string::npos;
        if (args == std::string::npos) {
          if (!final_ && buf_.size() < kMaxHeaderBytes) return false;
          return Fallback(d);
        }
        const std::string name = buf_.substr(i, args - i);
        if (!Known(name)) return Fallback(d);
        Consume(args + kMistralArgs.size());
        StartCall(d, name);
        scanner_ = JsonValueScanner();
        bare_args_ = true;
        state_ = State::kCallArgs;
        return true;
      }
      case State::kCallHeader: {
        std::string name;
        size_t len = 0;
        Match m = CallHeader(buf_, &name, &len);
        // As when streamed: pieces wait while fewer than kMaxHeaderBytes are buffered.
        if (m == Match::kYes && len >= kMaxHeaderBytes) m = Match::kNo;
        if (m == Match::kMore && !final_ && buf_.size() < kMaxHeaderBytes) return false;
        if (m != Match::kYes || !Known(name)) {
          state_ = State::kBuffered;
          return true;
        }
        Consume(len);
        StartCall(d, name);
        scanner_ = JsonValueScanner();
        bare_args_ = false;
        state_ = State::kCallArgs;
        return true;
      }
      case State::kCallArgs: {
        const size_t n = scanner_.Feed(buf_);
        Arguments(d, std::string_view(buf_).substr(0, n));
        Consume(n);
        if (scanner_.done() || (final_ && buf_.empty())) {
          state_ = bare_args_ ? State::kText : State::kCallTail;
          return true;
        }
        return n > 0;
      }
      case State::kCallTail:
        return Tail();
      case State::kBuffered:
        return Buffered(d);
      case State::kHarmonyHeader:
        return HarmonyHeader(d);
      case State::kHarmonyBody: {
        static const std::vector<std::string_view> kEnds = {"<|end|>", "<|call|>", "<|return|>",
                                                            "<|start|>", "<|channel|>"};
        const int m = TextUntil(d, dest_, kEnds, &progressed);
        if (m < 0) return progressed;
        if (m >= 3) {  // a new header without an end: not consumed
          buf_.insert(0, kEnds[static_cast<size_t>(m)]);
          consumed_ -= kEnds[static_cast<size_t>(m)].size();
        }
        if (reasoning_from_) EndReasoning();
        state_ = State::kHarmonyHeader;
        return true;
      }
    }
    return false;
  }

  // After a streamed call's arguments: "}" and the syntax's closer or separator.
  bool Tail() {
    size_t i = SkipWs(buf_, 0);
    if (i == buf_.size() && !final_) return false;
    if (i < buf_.size() && buf_[i] == '}') ++i;
    const size_t j = SkipWs(buf_, i);
    if (j == buf_.size() && !final_) return false;
    const std::string_view rest = std::string_view(buf_).substr(j);
    if (f_.tools == ToolSyntax::kHermes) {
      size_t k = 0;
      const Match m = Literal(rest, &k, kHermesClose);
      if (m == Match::kMore && !final_) return false;
      Consume(m == Match::kYes ? j + k : i);
      state_ = State::kText;
      return true;
    }
    const char sep = f_.tools == ToolSyntax::kLlama3 ? ';' : ',';
    if (!rest.empty() && rest[0] == sep) {
      Consume(j + 1);
      state_ = State::kCallHeader;
      open_text_.clear();
      return true;
    }
    if (in_list_ && !rest.empty() && rest[0] == ']') {
      Consume(j + 1);
      in_list_ = false;
    } else {
      Consume(i);
    }
    state_ = State::kText;
    return true;
  }

  // Calls written another way: parsed whole once closed (hermes: </tool_call>; the others:
  // the end of the output). Valid calls to offered functions become calls, else it is text.
  bool Buffered(OutputDelta* d) {
    size_t end = buf_.size(), close_len = 0;
    if (f_.tools == ToolSyntax::kHermes) {
      const size_t at = buf_.find(kHermesClose);
      if (at == std::string::npos && !final_) return false;
      if (at != std::string::npos) {
        end = at;
        close_len = kHermesClose.size();
      }
    } else if (!final_) {
      return false;
    }
    std::string body = buf_.substr(0, end);
    if (in_list_) body = "[" + body;
    std::vector<std::pair<std::string, std::string>> parsed;
    if (ParseCalls(body, &parsed)) {
      for (auto& [name, args] : parsed) {
        StartCall(d, name);
        Arguments(d, args);
      }
    } else {
      Emit(d, Dest::kContent, open_text_ + buf_.substr(0, end + close_len));
    }
    Consume(end + close_len);
    open_text_.clear();
    in_list_ = false;
    state_ = State::kText;
    return true;
  }

  // One call object, a list of them, or (Llama 3) several separated by ';'.
  bool ParseCalls(const std::string& body,
                  std::vector<std::pair<std::string, std::string>>* out) const {
    std::vector<std::string> pieces;
    if (f_.tools == ToolSyntax::kLlama3) {
      size_t from = 0;
      for (size_t at; (at = body.find(';', from)) != std::string::npos; from = at + 1) {
        pieces.push_back(body.substr(from, at - from));
      }
      pieces.push_back(body.substr(from));
      // A ';' inside a string: fall back to the whole text as one object.
      for (const std::string& p : pieces) {
        if (json::parse(p, nullptr, false).is_discarded()) {
          pieces = {body};
          break;
        }
      }
    } else {
      pieces = {body};
    }
    for (const std::string& p : pieces) {
      // Copies and dumps recurse per level: a model's deep nesting stays text.
      if (JsonNestingDepth(p) > kMaxCallNesting) return false;
      const json v = json::parse(p, nullptr, false);
      const json list = v.is_array() ? v : json::array({v});
      if (list.empty()) return false;
      for (const json& call : list) {
        if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return false;
        const std::string name = call["name"].get<std::string>();
        if (!Known(name)) return false;
        const char* key = call.contains("arguments") ? "arguments" : "parameters";
        if (!call.contains(key)) return false;
        const json& args = call[key];
        // Arguments as a JSON string holding an object are taken as that object.
        if (args.is_string()) {
          if (JsonNestingDepth(args.get_ref<const std::string&>()) > kMaxCallNesting) return false;
          const json inner = json::parse(args.get<std::string>(), nullptr, false);
          if (!inner.is_object()) return false;
          out->emplace_back(name, inner.dump(-1, ' ', false, json::error_handler_t::replace));
        } else if (args.is_object()) {
          out->emplace_back(name, args.dump(-1, ' ', false, json::error_handler_t::replace));
        } else {
          return false;
        }
      }
    }
    return true;
  }

  bool Fallback(OutputDelta* d) {
    state_ = State::kBuffered;
    return Buffered(d) || true;
  }

  // <|start|>assistant<|channel|>NAME[ to=functions.f][ <|constrain|>json]<|message|>
  bool HarmonyHeader(OutputDelta* d) {
    for (std::string_view end : {"<|end|>", "<|call|>", "<|return|>"}) {
      if (std::string_view(buf_).substr(0, end.size()) == end) {
        Consume(end.size());
        return true;
      }
    }
    if (buf_.empty()) return false;
    const bool header = buf_.rfind("<|start|>", 0) == 0 || buf_.rfind("<|channel|>", 0) == 0;
    if (!header) {
      const std::string_view s = buf_;
      for (std::string_view m : {"<|start|>", "<|channel|>", "<|end|>", "<|call|>", "<|return|>"}) {
        if (s.size() < m.size() && m.substr(0, s.size()) == s && !final_) return false;
      }
      dest_ = Dest::kContent;  // text without a header: the answer
      state_ = State::kHarmonyBody;
      return true;
    }
    size_t msg = buf_.find("<|message|>");
    if (msg != std::string::npos && msg + 11 > kMaxHeaderBytes) msg = std::string::npos;
    if (msg == std::string::npos) {
      if (!final_ && buf_.size() < kMaxHeaderBytes) return false;
      // A header that does not end within the bound carries no text: it is dropped (the same
      // bytes whether the text came whole or in pieces).
      Consume(std::min(buf_.size(), kMaxHeaderBytes));
      return true;
    }
    const std::string head = buf_.substr(0, msg);
    std::string channel, recipient;
    if (size_t c = head.find("<|channel|>"); c != std::string::npos) {
      size_t e = c + 11;
      while (e < head.size() && !IsWs(head[e]) && head[e] != '<') ++e;
      channel = head.substr(c + 11, e - c - 11);
    }
    if (size_t t = head.find("to="); t != std::string::npos) {
      size_t e = t + 3;
      while (e < head.size() && !IsWs(head[e]) && head[e] != '<') ++e;
      recipient = head.substr(t + 3, e - t - 3);
    }
    const size_t start = Offset();
    Consume(msg + 11);
    if (channel == "analysis") {
      dest_ = Dest::kReasoning;
      reasoning_from_ = start;
    } else if (o_.tools && recipient.rfind("functions.", 0) == 0 && Known(recipient.substr(10))) {
      dest_ = Dest::kArguments;
      StartCall(d, recipient.substr(10));
    } else {
      dest_ = Dest::kContent;
    }
    state_ = State::kHarmonyBody;
    return true;
  }

  const ChatFormat f_;
  ParserOptions o_;
  const size_t prefix_len_;
  std::string buf_;
  size_t consumed_ = 0;
  bool final_ = false;
  State state_ = State::kStart;
  bool thought_ = false;    // a <think> section has ended
  bool in_list_ = false;    // inside Mistral's [ ... ] list of calls
  bool bare_args_ = false;  // Mistral's name[ARGS]{...}: no closing brace of a call object
  std::string pending_ws_;  // whitespace after a call, sent when text follows
  std::string open_text_;   // the marker that opened the current call, for a fallback to text
  JsonValueScanner scanner_;
  Dest dest_ = Dest::kContent;
  std::optional<size_t> reasoning_from_;
};

OutputParser::OutputParser(ChatFormat format, ParserOptions options)
    : impl_(std::make_unique<Impl>(std::move(format), std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputDelta OutputParser::Add(std::string_view text) { return impl_->Add(text); }
OutputDelta OutputParser::Finish() { return impl_->Finish(); }
const std::vector<ToolCall>& OutputParser::tool_calls() const { return impl_->calls_; }
const std::vector<std::pair<size_t, size_t>>& OutputParser::reasoning_ranges() const {
  return impl_->reasoning_ranges_;
}

ParsedOutput ParseOutput(const ChatFormat& format, const ParserOptions& options,
                         std::string_view text) {
  OutputParser p(format, options);
  ParsedOutput out;
  for (const OutputDelta& d : {p.Add(text), p.Finish()}) {
    out.content += d.content;
    out.reasoning += d.reasoning;
  }
  out.tool_calls = p.tool_calls();
  return out;
}

}  // namespace inflight::chat
