// The families model/families.cc registers, one file each.
#pragma once

namespace inflight {

class ModelFamily;

const ModelFamily& LlamaFamily();     // family_llama.cc: Llama 2/3, Mistral, Mixtral
const ModelFamily& Qwen2Family();     // family_qwen.cc
const ModelFamily& Qwen3Family();     // family_qwen.cc
const ModelFamily& Qwen2MoeFamily();  // family_qwen.cc
const ModelFamily& Qwen3MoeFamily();  // family_qwen.cc
const ModelFamily& Gpt2Family();      // family_gpt2.cc
const ModelFamily& Gemma2Family();    // family_gemma.cc
const ModelFamily& Gemma3Family();    // family_gemma.cc
const ModelFamily& Phi3Family();      // family_phi3.cc
const ModelFamily& GptOssFamily();    // family_gpt_oss.cc

}  // namespace inflight
