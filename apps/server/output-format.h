// Structured output on the completion routes: OpenAI's `response_format` (text, json_object,
// json_schema) and llama-server's `grammar` (GBNF text) become the job's TokenConstraint
// (runtime/structured-output.h). Ollama's `format` arrives here translated to response_format.
#pragma once

#include <nlohmann/json.hpp>

#include "openai-api.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"

namespace hearth::server {

// Reads `response_format` and `grammar` of a request body and sets job->generate.constraint (left
// null for text). A malformed field, a schema keyword the converter does not support, a grammar the
// parser refuses, or grammar together with a JSON response_format: false with a 400 naming the
// field (param) in *err.
bool parse_output_format(const nlohmann::json& j, const ApiLimits& limits, const Engine& engine,
                         Job* job, ApiError* err);

}  // namespace hearth::server
