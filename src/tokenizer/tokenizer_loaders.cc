// Building a TokenizerSpec from GGUF metadata (tokenizer.ggml.*) or from Hugging Face
// tokenizer.json + tokenizer_config.json.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace inflight {
namespace {

constexpr const char kGpt2Regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char kLlama3Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// GPT-4o's o200k (gpt-oss, Phi-4-mini): letter runs split at case changes, a contraction
// joined to the word, digits in threes, "/" and line breaks kept after punctuation.
constexpr const char kGpt4oRegex[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char kQwen2Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Texts of control tokens that end a turn in common chat formats.
constexpr const char* kEndOfTurnTexts[] = {
    "<|eot_id|>",    "<|im_end|>", "<|end_of_text|>", "<|endoftext|>",
    "<end_of_turn>", "<|end|>",    "<|eom_id|>",
    "<|return|>",  // harmony (gpt-oss): the final answer is done
    "<|call|>"};   // harmony: a tool call is done

void AddEndOfTurnIds(TokenizerSpec* spec) {
  // In harmony, <|end|> closes one message of a turn (the analysis before the final answer),
  // not the turn: with <|return|> and <|call|> in the vocabulary it does not stop generation
  // (as llama.cpp decides too).
  const auto has = [&](std::string_view text) {
    return std::find(spec->tokens.begin(), spec->tokens.end(), text) != spec->tokens.end();
  };
  const bool harmony = has("<|return|>") && has("<|call|>");
  for (int32_t id = 0; id < static_cast<int32_t>(spec->tokens.size()); ++id) {
    for (const char* t : kEndOfTurnTexts) {
      if (spec->tokens[id] != t || id == spec->eos_id) continue;
      if (harmony && spec->tokens[id] == "<|end|>") continue;
      spec->extra_eos_ids.push_back(id);
    }
  }
}

}  // namespace

StatusOr<TokenizerSpec> Tokenizer::SpecFromGguf(const GgufFile& gguf) {
  TokenizerSpec spec;
  ASSIGN_OR_RETURN(std::optional<std::string> model, gguf.GetString("tokenizer.ggml.model"));
  if (!model)
    return InvalidArgumentError("GGUF has no tokenizer (tokenizer.ggml.model is missing)");
  if (*model == "llama") {
    spec.model = TokenizerModel::kSentencePiece;
  } else if (*model == "gpt2") {
    spec.model = TokenizerModel::kByteLevelBpe;
  } else {
    return UnimplementedError("tokenizer model '" + *model + "' is not supported (llama, gpt2)");
  }
  const GgufValue* tokens = gguf.Find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->elem_type != GgufType::kString) {
    return InvalidArgumentError("tokenizer.ggml.tokens is missing or not a string array");
  }
  spec.tokens = tokens->strings;
  const size_t n = spec.tokens.size();
  if (const GgufValue* scores = gguf.Find("tokenizer.ggml.scores")) {
    if (scores->elem_type != GgufType::kF32 || scores->floats.size() != n) {
      return InvalidArgumentError("tokenizer.ggml.scores must be " + std::to_string(n) + " floats");
    }
    spec.scores.assign(scores->floats.begin(), scores->floats.end());
  }
  if (const GgufValue* types = gguf.Find("tokenizer.ggml.token_type")) {
    if (types->ints.size() != n)
      return InvalidArgumentError("tokenizer.ggml.token_type must have " + std::to_string(n) +
                                  " entries");
    for (int64_t t : types->ints) spec.types.push_back(static_cast<TokenType>(t));
  }
  if (const GgufValue* merges = gguf.Find("tokenizer.ggml.merges")) {
    if (merges->elem_type != GgufType::kString)
      return InvalidArgumentError("tokenizer.ggml.merges must be strings");
    spec.merges = merges->strings;
  }
  if (spec.model == TokenizerModel::kSentencePiece) {
    if (spec.scores.empty())
      return InvalidArgumentError("SentencePiece tokenizer needs tokenizer.ggml.scores");
    spec.merges.clear();
    spec.byte_fallback = true;
    spec.add_space_prefix = true;
    spec.add_bos = true;
  } else {
    if (spec.merges.empty())
      return InvalidArgumentError("BPE tokenizer needs tokenizer.ggml.merges");
    spec.scores.clear();
    spec.byte_fallback = false;
    spec.add_space_prefix = false;
    spec.add_bos = false;
    ASSIGN_OR_RETURN(std::optional<std::string> pre, gguf.GetString("tokenizer.ggml.pre"));
    const std::string p = pre.value_or("default");
    if (p == "llama-bpe" || p == "llama3" || p == "smaug-bpe") {
      spec.pre_regexes = {kLlama3Regex};
      spec.ignore_merges = true;
    } else if (p == "qwen2" || p == "deepseek-r1-qwen") {
      spec.pre_regexes = {kQwen2Regex};
      // Qwen's tokenizer.json normalizes to NFC first; llama.cpp skips that, we follow HF.
      spec.nfc = true;
    } else if (p == "gpt-4o") {
      // gpt-oss and Phi-4-mini. Their tokenizer.json sets ignore_merges, as tiktoken does.
      spec.pre_regexes = {kGpt4oRegex};
      spec.ignore_merges = true;
    } else if (p == "gpt-2" || p == "default" || p == "gpt2") {
      spec.pre_regexes = {kGpt2Regex};
    } else {
      return UnimplementedError("pre-tokenizer '" + p +
                                "' is not supported (gpt-2, llama-bpe, qwen2, gpt-4o)");
    }
  }
  auto get_id = [&](const char* key, int32_t* out) -> Status {
    ASSIGN_OR_RETURN(std::optional<int64_t> v, gguf.GetInt(key));
    if (v) *out = static_cast<int32_t>(*v);
    return OkStatus();
  };
  RETURN_IF_ERROR(get_id("tokenizer.ggml.bos_token_id", &spec.bos_id));
  RETURN_IF_ERROR(get_id("tokenizer.ggml.eos_token_id", &spec.eos_id));
  RETURN_IF_ERROR(get_id("tokenizer.ggml.unknown_token_id", &spec.unk_id));
  RETURN_IF_ERROR(get_id("tokenizer.ggml.padding_token_id", &spec.pad_id));
  int32_t eot = -1;
  RETURN_IF_ERROR(get_id("tokenizer.ggml.eot_token_id", &eot));
  if (eot >= 0) spec.extra_eos_ids.push_back(eot);
  ASSIGN_OR_RETURN(std::optional<bool> add_bos, gguf.GetBool("tokenizer.ggml.add_bos_token"));
  ASSIGN_OR_RETURN(std::optional<bool> add_eos, gguf.GetBool("tokenizer.ggml.add_eos_token"));
  ASSIGN_OR_RETURN(std::optional<bool> space, gguf.GetBool("tokenizer.ggml.add_space_prefix"));
  if (add_bos) spec.add_bos = *add_bos;
  if (add_eos) spec.add_eos = *add_eos;
  if (space) spec.add_space_prefix = *space;
  ASSIGN_OR_RETURN(std::optional<std::string> chat_template,
                   gguf.GetString("tokenizer.chat_template"));
  if (chat_template) spec.chat_template = std::move(*chat_template);
  const StatusOr<std::optional<std::string>> name = gguf.GetString("general.name");
  std::string lower_name = name.ok() ? name->value_or("") : "";
  std::transform(lower_name.begin(), lower_name.end(), lower_name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (spec.model == TokenizerModel::kSentencePiece && !spec.types.empty() &&
      (lower_name.find("phi-3") != std::string::npos ||
       lower_name.find("phi3") != std::string::npos)) {
    // Phi-3's tokenizer.json strips the whitespace after its special tokens ("<|user|>\nHi"
    // encodes as <|user|> "Hi") except after <unk>, <s> and <|endoftext|>. GGUF keeps no strip
    // flags, so llama.cpp recognizes Phi-3 by its name; we do the same.
    for (int32_t id = 0; id < static_cast<int32_t>(spec.tokens.size()); ++id) {
      const TokenType t = spec.types[id];
      const std::string& text = spec.tokens[id];
      if (text.empty() ||
          (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown)) {
        continue;
      }
      const bool keep = text == "<unk>" || text == "<s>" || text == "<|endoftext|>";
      spec.added.push_back({text, id, t != TokenType::kUserDefined, false, !keep});
    }
  }
  AddEndOfTurnIds(&spec);
  return spec;
}

std::string GgufPreTokenizerName(const TokenizerSpec& spec) {
  if (spec.pre_regexes.size() != 1) return "";
  const std::string& re = spec.pre_regexes[0];
  if (re == kGpt2Regex) return "gpt-2";
  if (re == kLlama3Regex) return "llama-bpe";
  if (re == kQwen2Regex) return "qwen2";
  if (re == kGpt4oRegex) return "gpt-4o";
  return "";
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(TokenizerSpec spec, SpecFromGguf(gguf));
  return Create(std::move(spec));
}

namespace {

using nlohmann::json;

// Walks a normalizer / pre-tokenizer / post-processor and its nested sequences.
template <typename Fn>
void ForEachComponent(const json& node, const char* list_key, Fn&& fn) {
  if (!node.is_object()) return;
  if (node.value("type", "") == "Sequence" && node.contains(list_key) &&
      node[list_key].is_array()) {
    for (const json& child : node[list_key]) ForEachComponent(child, list_key, fn);
    return;
  }
  fn(node);
}

std::string TokenContent(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

Status FillSpecFromJson(const json& tj, const json& cfg, TokenizerSpec* spec) {
  if (!tj.is_object() || !tj.contains("model"))
    return InvalidArgumentError("tokenizer.json has no 'model'");
  const json& model = tj["model"];
  const std::string type = model.value("type", "");
  if (type != "BPE")
    return UnimplementedError("tokenizer.json model type '" + type + "' is not supported (BPE)");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return InvalidArgumentError("tokenizer.json model has no vocab");
  int64_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer())
      return InvalidArgumentError("vocab id of '" + it.key() + "' is not an integer");
    max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
  }
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& a : tj["added_tokens"]) max_id = std::max<int64_t>(max_id, a.value("id", -1));
  }
  if (max_id < 0 || max_id > (1 << 24))
    return InvalidArgumentError("tokenizer.json vocabulary ids out of range");
  spec->tokens.assign(max_id + 1, "");
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0) return InvalidArgumentError("negative vocab id");
    spec->tokens[id] = it.key();
  }
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const json& m : model["merges"]) {
      if (m.is_string())
        spec->merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2)
        spec->merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else
        return InvalidArgumentError("tokenizer.json merge entry is neither 'a b' nor [a, b]");
    }
  }
  spec->byte_fallback = model.value("byte_fallback", false);
  spec->ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"];
    for (size_t i = 0; i < spec->tokens.size(); ++i) {
      if (spec->tokens[i] == unk) spec->unk_id = static_cast<int32_t>(i);
    }
  }
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& a : tj["added_tokens"]) {
      AddedToken t;
      t.content = a.value("content", "");
      t.id = a.value("id", -1);
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      if (t.id >= 0 && spec->tokens[t.id].empty()) spec->tokens[t.id] = t.content;
      spec->added.push_back(t);
    }
  }

  // Byte-level or SentencePiece-style, from the pre-tokenizer / decoder.
  bool byte_level = false;
  bool metaspace_prefix = false;
  const json empty = json::object();
  const json& pre =
      tj.contains("pre_tokenizer") && tj["pre_tokenizer"].is_object() ? tj["pre_tokenizer"] : empty;
  ForEachComponent(pre, "pretokenizers", [&](const json& c) {
    const std::string t = c.value("type", "");
    if (t == "ByteLevel") {
      byte_level = true;
      if (c.value("use_regex", true)) spec->pre_regexes.push_back(kGpt2Regex);
      if (c.value("add_prefix_space", false)) spec->add_space_prefix = true;
    } else if (t == "Split" && c.contains("pattern") && c["pattern"].contains("Regex")) {
      spec->pre_regexes.push_back(c["pattern"]["Regex"].get<std::string>());
    } else if (t == "Metaspace") {
      const std::string scheme =
          c.value("prepend_scheme", c.value("add_prefix_space", true) ? "always" : "never");
      metaspace_prefix = scheme != "never";
    }
  });
  if (tj.contains("decoder") && tj["decoder"].is_object() &&
      tj["decoder"].value("type", "") == "ByteLevel")
    byte_level = true;
  spec->model = byte_level ? TokenizerModel::kByteLevelBpe : TokenizerModel::kSentencePiece;
  if (!byte_level) {
    bool prepend = false;
    const json& norm =
        tj.contains("normalizer") && tj["normalizer"].is_object() ? tj["normalizer"] : empty;
    ForEachComponent(norm, "normalizers", [&](const json& c) {
      if (c.value("type", "") == "Prepend") prepend = true;
    });
    spec->add_space_prefix = prepend || metaspace_prefix;
    spec->pre_regexes.clear();
  } else {
    spec->add_space_prefix = false;
  }
  if (tj.contains("normalizer") && tj["normalizer"].is_object()) {
    ForEachComponent(tj["normalizer"], "normalizers", [&](const json& c) {
      if (c.value("type", "") == "NFC") spec->nfc = true;
    });
  }

  auto id_of = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (const AddedToken& a : spec->added)
      if (a.content == text) return a.id;
    for (size_t i = 0; i < spec->tokens.size(); ++i)
      if (spec->tokens[i] == text) return static_cast<int32_t>(i);
    return -1;
  };
  // BOS from the post-processor template ("<s> $A"), else from tokenizer_config.json.
  if (tj.contains("post_processor") && tj["post_processor"].is_object()) {
    ForEachComponent(tj["post_processor"], "processors", [&](const json& c) {
      if (c.value("type", "") != "TemplateProcessing" || !c.contains("single")) return;
      const json& single = c["single"];
      if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
        spec->bos_id = id_of(single[0]["SpecialToken"].value("id", ""));
        spec->add_bos = spec->bos_id >= 0;
      }
      if (single.is_array() && single.size() > 1 && single.back().contains("SpecialToken")) {
        spec->eos_id = id_of(single.back()["SpecialToken"].value("id", ""));
        spec->add_eos = spec->eos_id >= 0;
      }
    });
  }
  if (cfg.is_object()) {
    if (cfg.contains("bos_token") && spec->bos_id < 0)
      spec->bos_id = id_of(TokenContent(cfg["bos_token"]));
    if (cfg.contains("eos_token")) {
      const int32_t eos = id_of(TokenContent(cfg["eos_token"]));
      if (eos >= 0) spec->eos_id = eos;
    }
    if (cfg.contains("pad_token")) spec->pad_id = id_of(TokenContent(cfg["pad_token"]));
    if (cfg.contains("unk_token") && spec->unk_id < 0)
      spec->unk_id = id_of(TokenContent(cfg["unk_token"]));
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      spec->add_bos = cfg["add_bos_token"].get<bool>() && spec->bos_id >= 0;
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      spec->add_eos = cfg["add_eos_token"].get<bool>() && spec->eos_id >= 0;
    // A string, or a list of {name, template} (the one named "default" is the chat template).
    if (cfg.contains("chat_template")) {
      const json& t = cfg["chat_template"];
      if (t.is_string()) spec->chat_template = t.get<std::string>();
      if (t.is_array()) {
        for (const json& named : t) {
          if (named.is_object() && named.value("name", "") == "default" &&
              named.contains("template") && named["template"].is_string()) {
            spec->chat_template = named["template"].get<std::string>();
          }
        }
      }
    }
  }
  AddEndOfTurnIds(spec);
  return OkStatus();
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<TokenizerSpec> Tokenizer::SpecFromHuggingFaceJson(const std::string& tokenizer_json,
                                                           const std::string& config_json) {
  json tj = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (tj.is_discarded()) return InvalidArgumentError("tokenizer.json is not valid JSON");
  json cfg = config_json.empty() ? json::object() : json::parse(config_json, nullptr, false);
  if (cfg.is_discarded()) return InvalidArgumentError("tokenizer_config.json is not valid JSON");
  TokenizerSpec spec;
  try {
    RETURN_IF_ERROR(FillSpecFromJson(tj, cfg, &spec));
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string("tokenizer.json: ") + e.what());
  }
  return spec;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHuggingFaceFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string tj, ReadWholeFile(path));
  std::string cfg;
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (auto c = ReadWholeFile(dir + "/tokenizer_config.json"); c.ok()) cfg = std::move(c).value();
  ASSIGN_OR_RETURN(TokenizerSpec spec, SpecFromHuggingFaceJson(tj, cfg));
  return Create(std::move(spec));
}

}  // namespace inflight
