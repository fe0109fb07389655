// The engine's statistics as the serving core's plain records (metrics, the web dashboard).
#pragma once

#include <vector>

#include "engine/executor_config.h"
#include "engine/request.h"
#include "kvcache/block_manager.h"
#include "serving/llm_stats.h"

namespace inflight::serving {

EngineStep ToEngineStep(const IterationStats& s);
std::vector<EngineStep> ToEngineSteps(const std::vector<IterationStats>& steps);
LlmRequestRecord ToRequestRecord(const RequestStats& s);
KvBlocks ToKvBlocks(const BlockCounts& b);

}  // namespace inflight::serving
