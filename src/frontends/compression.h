// HTTP content codings of request and response bodies (Triton's request_compression_algorithm
// and response_compression_algorithm): gzip and deflate, with zlib.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace inflight::frontends {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// A Content-Encoding value: identity (or absent), gzip (x-gzip) or deflate; INVALID_ARGUMENT
// for anything else.
StatusOr<ContentCoding> ParseContentEncoding(std::string_view value);

// The coding a client asks for in Accept-Encoding: the supported one with the highest q-value
// (gzip before deflate on a tie), identity when none ("*" is not honoured, as in Triton).
ContentCoding PreferredCoding(std::string_view accept_encoding);

std::string_view CodingName(ContentCoding c);

// Decodes `data`. "deflate" is zlib-wrapped (RFC 9110); raw deflate is accepted too. At most
// `max_bytes` come out: a larger result is RESOURCE_EXHAUSTED without decoding further (a zip
// bomb costs no memory); corrupt or truncated data is INVALID_ARGUMENT.
StatusOr<std::string> Decompress(std::string_view data, ContentCoding coding, size_t max_bytes);

// Encodes `data` (identity: unchanged).
std::string Compress(std::string_view data, ContentCoding coding);

}  // namespace inflight::frontends
